// Foundation's basic types and macros (shimkit's Foundation subset on the GNUstep 2.0 ABI).
#pragma once

#include <objc/runtime.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
#define FOUNDATION_EXTERN extern "C" __attribute__((visibility("default")))
#else
#define FOUNDATION_EXTERN extern __attribute__((visibility("default")))
#endif
#define FOUNDATION_EXPORT FOUNDATION_EXTERN
#define FOUNDATION_STATIC_INLINE static inline

typedef long NSInteger;
typedef unsigned long NSUInteger;
typedef double CGFloat;
typedef double NSTimeInterval;
#define NSIntegerMax LONG_MAX
#define NSIntegerMin LONG_MIN
#define NSUIntegerMax ULONG_MAX
static const NSInteger NSNotFound = NSIntegerMax;

typedef struct _NSZone NSZone;

// Apple's spelling: a fixed underlying type, usable from C++ as an enum of that type.
// The SDK whose API the stand-in follows (macOS 15): upstream's et_metal.mm declares what older SDKs lack below it.
#ifndef __MAC_OS_X_VERSION_MAX_ALLOWED
#define __MAC_OS_X_VERSION_MAX_ALLOWED 150000
#endif
#define NS_ENUM(_type, _name) enum _name : _type _name; enum _name : _type
// As Apple's headers define it for C++: options are the integer type itself, so flags OR together and 0 converts.
#define NS_OPTIONS(_type, _name) _type _name; enum : _type
#define NS_CLOSED_ENUM(_type, _name) NS_ENUM(_type, _name)
#define NS_ERROR_ENUM(_domain, _name) enum _name : NSInteger _name; enum _name : NSInteger
#define NS_TYPED_ENUM
#define NS_TYPED_EXTENSIBLE_ENUM
#define NS_STRING_ENUM
#define NS_EXTENSIBLE_STRING_ENUM

#define NS_ASSUME_NONNULL_BEGIN _Pragma("clang assume_nonnull begin")
#define NS_ASSUME_NONNULL_END _Pragma("clang assume_nonnull end")

// Annotations Apple's headers and the code written against them use; they change nothing here.
#define NS_DESIGNATED_INITIALIZER __attribute__((objc_designated_initializer))
#define NS_REQUIRES_SUPER __attribute__((objc_requires_super))
#define NS_RETURNS_RETAINED __attribute__((ns_returns_retained))
#define NS_RETURNS_NOT_RETAINED __attribute__((ns_returns_not_retained))
#define NS_RETURNS_INNER_POINTER __attribute__((objc_returns_inner_pointer))
#define NS_CONSUMED __attribute__((ns_consumed))
#define NS_UNAVAILABLE __attribute__((unavailable))
#define NS_FORMAT_FUNCTION(F, A) __attribute__((format(__NSString__, F, A)))
#define NS_FORMAT_ARGUMENT(A) __attribute__((format_arg(A)))
#define NS_NOESCAPE __attribute__((noescape))
#define NS_INLINE static inline __attribute__((always_inline))
#define NS_ROOT_CLASS __attribute__((objc_root_class))
#define NS_SWIFT_NAME(...)
#define NS_SWIFT_UNAVAILABLE(...)
#define NS_SWIFT_NOTHROW
#define NS_REFINED_FOR_SWIFT
#define NS_AVAILABLE(...)
#define NS_AVAILABLE_MAC(...)
#define NS_AVAILABLE_IOS(...)
#define NS_CLASS_AVAILABLE(...)
#define NS_DEPRECATED(...)
#define NS_ENUM_AVAILABLE(...)
#define API_AVAILABLE(...)
#define API_UNAVAILABLE(...)
#define API_DEPRECATED(...)
#define API_DEPRECATED_WITH_REPLACEMENT(...)
#define NS_HEADER_AUDIT_BEGIN(...) NS_ASSUME_NONNULL_BEGIN
#define NS_HEADER_AUDIT_END(...) NS_ASSUME_NONNULL_END
#define NS_VALID_UNTIL_END_OF_SCOPE
#define NS_AUTOMATED_REFCOUNT_UNAVAILABLE
#define NS_WARN_UNUSED_RESULT __attribute__((warn_unused_result))
#define NS_NONATOMIC_IOSONLY nonatomic

typedef NS_ENUM(NSInteger, NSComparisonResult) {
  NSOrderedAscending = -1L,
  NSOrderedSame = 0,
  NSOrderedDescending = 1,
};

#ifndef MIN
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#endif
#ifndef MAX
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#endif

@class NSString;

// Writes the formatted message, with a newline, to stderr.
FOUNDATION_EXPORT void NSLog(NSString* format, ...) NS_FORMAT_FUNCTION(1, 2);
FOUNDATION_EXPORT void NSLogv(NSString* format, va_list args) NS_FORMAT_FUNCTION(1, 0);

FOUNDATION_EXPORT NSString* NSStringFromSelector(SEL selector);
FOUNDATION_EXPORT SEL NSSelectorFromString(NSString* name);
FOUNDATION_EXPORT NSString* NSStringFromClass(Class cls);
FOUNDATION_EXPORT Class NSClassFromString(NSString* name);
FOUNDATION_EXPORT NSString* NSStringFromProtocol(Protocol* protocol);
FOUNDATION_EXPORT Protocol* NSProtocolFromString(NSString* name);
