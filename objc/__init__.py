"""Objective-C++ on Linux: an Objective-C runtime, and the Foundation, Metal and MetalPerformanceShadersGraph
subsets that shimkit's and upstream's ``.mm`` files use, computed on the CPU (issue 67).

clang compiles the ``.mm`` files for the GNUstep 2.0 Objective-C ABI (``-fobjc-runtime=gnustep-2.0``); what that
ABI calls (class loading, message sending, exceptions that cross C++ and Objective-C++ frames, autorelease pools)
is shimkit's own runtime here (``objc/runtime/``), and the frameworks are written against it in Objective-C++
(``objc/Foundation/``, ``objc/Metal/``, ``objc/MPSGraph/``; their headers under ``objc/include/``). Blocks come from
Debian's ``libblocksruntime``. Nothing here is third-party source.
"""
