// shimkit's Foundation subset for Objective-C++ on Linux (clang -fobjc-runtime=gnustep-2.0, manual retain/release).
// The classes and methods declared in these headers are all implemented; anything else of Apple's Foundation is
// absent.
#pragma once

#include <Foundation/NSObjCRuntime.h>
#include <Foundation/NSZone.h>
#include <Foundation/NSRange.h>
#include <Foundation/NSObject.h>
#include <Foundation/NSEnumerator.h>
#include <Foundation/NSString.h>
#include <Foundation/NSValue.h>
#include <Foundation/NSArray.h>
#include <Foundation/NSDictionary.h>
#include <Foundation/NSData.h>
#include <Foundation/NSNull.h>
#include <Foundation/NSException.h>
#include <Foundation/NSError.h>
#include <Foundation/NSAutoreleasePool.h>
#include <dispatch/dispatch.h>
