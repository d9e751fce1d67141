// NSString (immutable, UTF-8 inside) and NSMutableString. Literals: @"..." of up to 8 ASCII characters is a
// tagged pointer, longer ones are NSConstantString objects; both are NSStrings and need no retain.
#pragma once
#include <Foundation/NSObject.h>
#include <Foundation/NSRange.h>

@class NSArray<__covariant ObjectType>;

typedef NSUInteger NSStringEncoding;
enum {
  NSASCIIStringEncoding = 1,
  NSUTF8StringEncoding = 4,
  NSISOLatin1StringEncoding = 5,
};
typedef unsigned short unichar;

typedef NS_OPTIONS(NSUInteger, NSStringCompareOptions) {
  NSCaseInsensitiveSearch = 1,
  NSLiteralSearch = 2,
  NSBackwardsSearch = 4,
};

@interface NSString : NSObject <NSCopying, NSMutableCopying, NSSecureCoding>
+ (instancetype)string;
+ (instancetype)stringWithString:(NSString*)string;
+ (instancetype)stringWithUTF8String:(const char*)bytes;
+ (instancetype)stringWithCString:(const char*)bytes encoding:(NSStringEncoding)encoding;
// printf's conversions, plus %@ (the argument's -description, "(null)" for nil).
+ (instancetype)stringWithFormat:(NSString*)format, ... NS_FORMAT_FUNCTION(1, 2);
- (instancetype)init;
- (instancetype)initWithString:(NSString*)string;
- (instancetype)initWithUTF8String:(const char*)bytes;
- (instancetype)initWithCString:(const char*)bytes encoding:(NSStringEncoding)encoding;
- (instancetype)initWithBytes:(const void*)bytes length:(NSUInteger)length encoding:(NSStringEncoding)encoding;
- (instancetype)initWithFormat:(NSString*)format, ... NS_FORMAT_FUNCTION(1, 2);
- (instancetype)initWithFormat:(NSString*)format arguments:(va_list)args NS_FORMAT_FUNCTION(1, 0);

// Characters are UTF-8 bytes: length and characterAtIndex: count bytes (the same as Apple's UTF-16 units for
// ASCII text, which is what shimkit's code handles).
@property(readonly) NSUInteger length;
- (unichar)characterAtIndex:(NSUInteger)index;
// Valid as long as the receiver (or the innermost autorelease pool) lives.
@property(readonly) const char* UTF8String NS_RETURNS_INNER_POINTER;
- (const char*)cStringUsingEncoding:(NSStringEncoding)encoding NS_RETURNS_INNER_POINTER;
- (NSUInteger)lengthOfBytesUsingEncoding:(NSStringEncoding)encoding;

- (BOOL)isEqualToString:(NSString*)other;
- (NSComparisonResult)compare:(NSString*)other;
- (BOOL)hasPrefix:(NSString*)prefix;
- (BOOL)hasSuffix:(NSString*)suffix;
- (BOOL)containsString:(NSString*)other;
- (NSRange)rangeOfString:(NSString*)other;
- (NSString*)substringFromIndex:(NSUInteger)from;
- (NSString*)substringToIndex:(NSUInteger)to;
- (NSString*)substringWithRange:(NSRange)range;
- (NSString*)stringByAppendingString:(NSString*)other;
- (NSString*)stringByAppendingFormat:(NSString*)format, ... NS_FORMAT_FUNCTION(1, 2);
- (NSString*)stringByReplacingOccurrencesOfString:(NSString*)target withString:(NSString*)replacement;
- (NSArray<NSString*>*)componentsSeparatedByString:(NSString*)separator;
@property(readonly) int intValue;
@property(readonly) NSInteger integerValue;
@property(readonly) long long longLongValue;
@property(readonly) float floatValue;
@property(readonly) double doubleValue;
@property(readonly) BOOL boolValue;
@end

@interface NSMutableString : NSString
+ (instancetype)stringWithCapacity:(NSUInteger)capacity;
- (instancetype)initWithCapacity:(NSUInteger)capacity;
- (void)appendString:(NSString*)string;
- (void)appendFormat:(NSString*)format, ... NS_FORMAT_FUNCTION(1, 2);
- (void)setString:(NSString*)string;
- (void)insertString:(NSString*)string atIndex:(NSUInteger)index;
- (void)deleteCharactersInRange:(NSRange)range;
@end

// The class of @"..." literals longer than a tagged pointer holds (clang's v2 constant-string layout).
@interface NSConstantString : NSString
@end
