// NSException and NSError; reporting an uncaught Objective-C exception.
#import "private.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

NSExceptionName const NSGenericException = @"NSGenericException";
NSExceptionName const NSRangeException = @"NSRangeException";
NSExceptionName const NSInvalidArgumentException = @"NSInvalidArgumentException";
NSExceptionName const NSInternalInconsistencyException = @"NSInternalInconsistencyException";
NSExceptionName const NSMallocException = @"NSMallocException";

NSErrorDomain const NSCocoaErrorDomain = @"NSCocoaErrorDomain";
NSErrorDomain const NSPOSIXErrorDomain = @"NSPOSIXErrorDomain";
NSErrorUserInfoKey const NSLocalizedDescriptionKey = @"NSLocalizedDescription";
NSErrorUserInfoKey const NSLocalizedFailureReasonErrorKey = @"NSLocalizedFailureReason";
NSErrorUserInfoKey const NSUnderlyingErrorKey = @"NSUnderlyingError";

static NSUncaughtExceptionHandler* uncaught_handler = nullptr;
static std::terminate_handler previous_terminate = nullptr;

NSUncaughtExceptionHandler* NSGetUncaughtExceptionHandler(void) {
  return uncaught_handler;
}

void NSSetUncaughtExceptionHandler(NSUncaughtExceptionHandler* handler) {
  uncaught_handler = handler;
}

// std::terminate with an Objective-C exception in flight: the handler NSSetUncaughtExceptionHandler named, then
// Apple's report of its name and reason, then abort.
static void terminate_with_report() {
  id exception = objc_shimkit_current_exception();
  if (!exception) {
    if (previous_terminate) previous_terminate();
    std::abort();
  }
  if (uncaught_handler && [exception isKindOfClass:[NSException class]]) uncaught_handler(exception);
  if ([exception isKindOfClass:[NSException class]]) {
    std::fprintf(stderr, "*** Terminating app due to uncaught exception '%s', reason: '%s'\n",
                 shimkit_utf8([exception name]), shimkit_utf8([exception reason]));
  } else {
    std::fprintf(stderr, "*** Terminating app due to uncaught exception %s\n", shimkit_utf8(exception));
  }
  std::abort();
}

static void raise_mutation(id collection) {
  [NSException raise:NSGenericException format:@"*** Collection <%s: %p> was mutated while being enumerated.",
                                               object_getClassName(collection), (void*)collection];
}

@implementation NSException {
  NSString* _name;
  NSString* _reason;
  NSDictionary* _userInfo;
}

+ (void)load {
  previous_terminate = std::set_terminate(terminate_with_report);
  objc_setEnumerationMutationHandler(raise_mutation);
}

+ (NSException*)exceptionWithName:(NSExceptionName)name reason:(NSString*)reason userInfo:(NSDictionary*)userInfo {
  return [[[self alloc] initWithName:name reason:reason userInfo:userInfo] autorelease];
}

- (instancetype)initWithName:(NSExceptionName)name reason:(NSString*)reason userInfo:(NSDictionary*)userInfo {
  self = [super init];
  _name = [name copy];
  _reason = [reason copy];
  _userInfo = [userInfo retain];
  return self;
}

+ (void)raise:(NSExceptionName)name format:(NSString*)format, ... {
  va_list args;
  va_start(args, format);
  [self raise:name format:format arguments:args];
  va_end(args);
  __builtin_unreachable();
}

+ (void)raise:(NSExceptionName)name format:(NSString*)format arguments:(va_list)args {
  NSString* reason = [[[NSString alloc] initWithFormat:format arguments:args] autorelease];
  [[self exceptionWithName:name reason:reason userInfo:nil] raise];
  __builtin_unreachable();
}

- (void)raise {
  objc_exception_throw(self);
}

- (void)dealloc {
  [_name release];
  [_reason release];
  [_userInfo release];
  [super dealloc];
}

- (NSExceptionName)name {
  return _name;
}

- (NSString*)reason {
  return _reason;
}

- (NSDictionary*)userInfo {
  return _userInfo;
}

- (NSString*)description {
  return _reason ? _reason : _name;
}

- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}

@end

@implementation NSError {
  NSString* _domain;
  NSInteger _code;
  NSDictionary* _userInfo;
}

+ (instancetype)errorWithDomain:(NSErrorDomain)domain code:(NSInteger)code userInfo:(NSDictionary*)dict {
  return [[[self alloc] initWithDomain:domain code:code userInfo:dict] autorelease];
}

- (instancetype)initWithDomain:(NSErrorDomain)domain code:(NSInteger)code userInfo:(NSDictionary*)dict {
  self = [super init];
  _domain = [domain copy];
  _code = code;
  _userInfo = [dict copy];
  return self;
}

- (void)dealloc {
  [_domain release];
  [_userInfo release];
  [super dealloc];
}

- (NSErrorDomain)domain {
  return _domain;
}

- (NSInteger)code {
  return _code;
}

- (NSDictionary*)userInfo {
  return _userInfo ? _userInfo : [NSDictionary dictionary];
}

- (NSString*)localizedDescription {
  id description = [_userInfo objectForKey:NSLocalizedDescriptionKey];
  if (description) return description;
  return [NSString stringWithFormat:@"The operation couldn\u2019t be completed. (%@ error %ld.)", _domain, (long)_code];
}

- (NSString*)localizedFailureReason {
  return [_userInfo objectForKey:NSLocalizedFailureReasonErrorKey];
}

- (NSString*)description {
  return [NSString stringWithFormat:@"Error Domain=%@ Code=%ld \"%@\"", _domain, (long)_code, [self localizedDescription]];
}

- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}

@end

@implementation NSAutoreleasePool {
  void* _token;
}

+ (void)addObject:(id)object {
  objc_shimkit_autorelease_add(object);
}

- (instancetype)init {
  self = [super init];
  _token = objc_autoreleasePoolPush();
  return self;
}

- (void)addObject:(id)object {
  objc_shimkit_autorelease_add(object);
}

- (void)drain {
  objc_autoreleasePoolPop(_token);
  [super release];
}

- (oneway void)release {
  [self drain];
}

- (instancetype)retain {
  [NSException raise:NSInvalidArgumentException format:@"*** -[NSAutoreleasePool retain]: cannot retain an autorelease pool"];
  return self;
}

- (instancetype)autorelease {
  [NSException raise:NSInvalidArgumentException format:@"*** -[NSAutoreleasePool autorelease]: cannot autorelease an autorelease pool"];
  return self;
}

@end
