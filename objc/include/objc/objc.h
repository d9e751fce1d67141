// The basic Objective-C types of shimkit's runtime (GNUstep 2.0 ABI, clang -fobjc-runtime=gnustep-2.0).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define OBJC_EXTERN_C extern "C"
#else
#define OBJC_EXTERN_C extern
#endif
#define OBJC_PUBLIC __attribute__((visibility("default")))
#define OBJC_EXPORT OBJC_EXTERN_C OBJC_PUBLIC

// clang recognises these three typedef names as its builtin id, Class and SEL.
typedef struct objc_class* Class;
typedef struct objc_object* id;
typedef struct objc_selector* SEL;
typedef struct objc_method* Method;
typedef struct objc_ivar* Ivar;
typedef struct objc_property* objc_property_t;

#ifdef __OBJC__
@class Protocol;
#else
typedef struct objc_object Protocol;
#endif

typedef id (*IMP)(id, SEL, ...);

// signed char as on Apple's x86-64, so that @(YES) boxes with numberWithBool: and %d prints 0 or 1.
typedef signed char BOOL;
#if __has_feature(objc_bool)
#define YES __objc_yes
#define NO __objc_no
#else
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#endif

// nullptr in C++, as Apple's headers have it: comparable with any pointer, C++ ones included.
#if defined(__cplusplus) && __cplusplus >= 201103L
#define nil nullptr
#define Nil nullptr
#else
#define nil ((id)0)
#define Nil ((Class)0)
#endif

#if !__has_feature(objc_arc) && !defined(__unsafe_unretained) && !defined(__OBJC__)
#define __unsafe_unretained
#endif
