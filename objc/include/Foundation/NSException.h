// NSException. Objective-C exceptions are C++ exceptions here: `@throw e` / [e raise] throw the object, which
// @catch (NSException* e), @catch (id e) and C++ `catch (...)` catch, and C++ exceptions pass through @try
// blocks untouched by their @catch clauses (only their @finally runs).
#pragma once
#include <Foundation/NSObject.h>

@class NSString, NSDictionary<__covariant KeyType, __covariant ObjectType>;

typedef NSString* NSExceptionName NS_TYPED_EXTENSIBLE_ENUM;

FOUNDATION_EXPORT NSExceptionName const NSGenericException;
FOUNDATION_EXPORT NSExceptionName const NSRangeException;
FOUNDATION_EXPORT NSExceptionName const NSInvalidArgumentException;
FOUNDATION_EXPORT NSExceptionName const NSInternalInconsistencyException;
FOUNDATION_EXPORT NSExceptionName const NSMallocException;

@interface NSException : NSObject <NSCopying>
+ (NSException*)exceptionWithName:(NSExceptionName)name reason:(NSString*)reason userInfo:(NSDictionary*)userInfo;
- (instancetype)initWithName:(NSExceptionName)name reason:(NSString*)reason userInfo:(NSDictionary*)userInfo;
+ (void)raise:(NSExceptionName)name format:(NSString*)format, ... NS_FORMAT_FUNCTION(2, 3) __attribute__((noreturn));
+ (void)raise:(NSExceptionName)name format:(NSString*)format arguments:(va_list)args NS_FORMAT_FUNCTION(2, 0) __attribute__((noreturn));
- (void)raise __attribute__((noreturn));
@property(readonly, copy) NSExceptionName name;
@property(readonly, copy) NSString* reason;
@property(readonly, copy) NSDictionary* userInfo;
@end

// Raises NSInternalInconsistencyException when the condition is false (assertions are never compiled out here).
#define NSAssert(condition, desc, ...)                                                                      \
  do {                                                                                                      \
    if (!(condition)) {                                                                                     \
      [NSException raise:NSInternalInconsistencyException format:(desc), ##__VA_ARGS__];                    \
    }                                                                                                       \
  } while (0)
#define NSCAssert NSAssert
#define NSParameterAssert(condition) NSAssert((condition), @"Invalid parameter not satisfying: %s", #condition)
#define NSCParameterAssert NSParameterAssert

typedef void NSUncaughtExceptionHandler(NSException* exception);
FOUNDATION_EXPORT NSUncaughtExceptionHandler* NSGetUncaughtExceptionHandler(void);
FOUNDATION_EXPORT void NSSetUncaughtExceptionHandler(NSUncaughtExceptionHandler* handler);
