// NSValue, NSNumber and NSNull.
#import "private.h"

#include <cmath>
#include <cstdio>
#include <cstring>

@implementation NSValue {
  const void* _pointer;
}

+ (NSValue*)valueWithPointer:(const void*)pointer {
  NSValue* value = [[[self alloc] init] autorelease];
  value->_pointer = pointer;
  return value;
}

+ (NSValue*)valueWithNonretainedObject:(id)object {
  return [self valueWithPointer:object];
}

- (void*)pointerValue {
  return const_cast<void*>(_pointer);
}

- (id)nonretainedObjectValue {
  return (id)_pointer;
}

- (BOOL)isEqual:(id)object {
  return [object isMemberOfClass:[NSValue class]] && ((NSValue*)object)->_pointer == _pointer;
}

- (NSUInteger)hash {
  return (NSUInteger)_pointer;
}

- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}

- (NSString*)description {
  return [NSString stringWithFormat:@"<%p>", _pointer];
}

@end

namespace {

enum Kind : char { SIGNED, UNSIGNED, FLOATING };

union Value {
  long long s;
  unsigned long long u;
  double d;
};

}  // namespace

// One value of one of three kinds, with the @encode of what it was made from. Equality and hashing are by
// numeric value across kinds (@(1) equals @(1.0) and @(1U)), as on Apple.
@implementation NSNumber {
  Value _value;
  Kind _kind;
  char _type;
}

static NSNumber* make_signed(NSNumber* number, long long value, char type) {
  number->_value.s = value;
  number->_kind = SIGNED;
  number->_type = type;
  return number;
}

static NSNumber* make_unsigned(NSNumber* number, unsigned long long value, char type) {
  number->_value.u = value;
  number->_kind = UNSIGNED;
  number->_type = type;
  return number;
}

static NSNumber* make_double(NSNumber* number, double value, char type) {
  number->_value.d = value;
  number->_kind = FLOATING;
  number->_type = type;
  return number;
}

- (instancetype)initWithChar:(char)value {
  return make_signed([self init], value, 'c');
}
- (instancetype)initWithInt:(int)value {
  return make_signed([self init], value, 'i');
}
- (instancetype)initWithUnsignedInt:(unsigned int)value {
  return make_unsigned([self init], value, 'I');
}
- (instancetype)initWithLong:(long)value {
  return make_signed([self init], value, 'q');
}
- (instancetype)initWithUnsignedLong:(unsigned long)value {
  return make_unsigned([self init], value, 'Q');
}
- (instancetype)initWithLongLong:(long long)value {
  return make_signed([self init], value, 'q');
}
- (instancetype)initWithUnsignedLongLong:(unsigned long long)value {
  return make_unsigned([self init], value, 'Q');
}
- (instancetype)initWithFloat:(float)value {
  return make_double([self init], value, 'f');
}
- (instancetype)initWithDouble:(double)value {
  return make_double([self init], value, 'd');
}
- (instancetype)initWithBool:(BOOL)value {
  return make_signed([self init], value ? 1 : 0, 'c');
}
- (instancetype)initWithInteger:(NSInteger)value {
  return make_signed([self init], value, 'q');
}
- (instancetype)initWithUnsignedInteger:(NSUInteger)value {
  return make_unsigned([self init], value, 'Q');
}

+ (NSNumber*)numberWithChar:(char)value {
  return [[[self alloc] initWithChar:value] autorelease];
}
+ (NSNumber*)numberWithUnsignedChar:(unsigned char)value {
  return make_unsigned([[[self alloc] init] autorelease], value, 'C');
}
+ (NSNumber*)numberWithShort:(short)value {
  return make_signed([[[self alloc] init] autorelease], value, 's');
}
+ (NSNumber*)numberWithUnsignedShort:(unsigned short)value {
  return make_unsigned([[[self alloc] init] autorelease], value, 'S');
}
+ (NSNumber*)numberWithInt:(int)value {
  return [[[self alloc] initWithInt:value] autorelease];
}
+ (NSNumber*)numberWithUnsignedInt:(unsigned int)value {
  return [[[self alloc] initWithUnsignedInt:value] autorelease];
}
+ (NSNumber*)numberWithLong:(long)value {
  return [[[self alloc] initWithLong:value] autorelease];
}
+ (NSNumber*)numberWithUnsignedLong:(unsigned long)value {
  return [[[self alloc] initWithUnsignedLong:value] autorelease];
}
+ (NSNumber*)numberWithLongLong:(long long)value {
  return [[[self alloc] initWithLongLong:value] autorelease];
}
+ (NSNumber*)numberWithUnsignedLongLong:(unsigned long long)value {
  return [[[self alloc] initWithUnsignedLongLong:value] autorelease];
}
+ (NSNumber*)numberWithFloat:(float)value {
  return [[[self alloc] initWithFloat:value] autorelease];
}
+ (NSNumber*)numberWithDouble:(double)value {
  return [[[self alloc] initWithDouble:value] autorelease];
}
+ (NSNumber*)numberWithBool:(BOOL)value {
  return [[[self alloc] initWithBool:value] autorelease];
}
+ (NSNumber*)numberWithInteger:(NSInteger)value {
  return [[[self alloc] initWithInteger:value] autorelease];
}
+ (NSNumber*)numberWithUnsignedInteger:(NSUInteger)value {
  return [[[self alloc] initWithUnsignedInteger:value] autorelease];
}

- (long long)longLongValue {
  switch (_kind) {
    case SIGNED: return _value.s;
    case UNSIGNED: return (long long)_value.u;
    default: return (long long)_value.d;
  }
}

- (unsigned long long)unsignedLongLongValue {
  switch (_kind) {
    case SIGNED: return (unsigned long long)_value.s;
    case UNSIGNED: return _value.u;
    default: return _value.d < 0 ? (unsigned long long)(long long)_value.d : (unsigned long long)_value.d;
  }
}

- (double)doubleValue {
  switch (_kind) {
    case SIGNED: return (double)_value.s;
    case UNSIGNED: return (double)_value.u;
    default: return _value.d;
  }
}

- (char)charValue {
  return (char)[self longLongValue];
}
- (unsigned char)unsignedCharValue {
  return (unsigned char)[self unsignedLongLongValue];
}
- (short)shortValue {
  return (short)[self longLongValue];
}
- (unsigned short)unsignedShortValue {
  return (unsigned short)[self unsignedLongLongValue];
}
- (int)intValue {
  return (int)[self longLongValue];
}
- (unsigned int)unsignedIntValue {
  return (unsigned int)[self unsignedLongLongValue];
}
- (long)longValue {
  return (long)[self longLongValue];
}
- (unsigned long)unsignedLongValue {
  return (unsigned long)[self unsignedLongLongValue];
}
- (float)floatValue {
  return (float)[self doubleValue];
}
- (BOOL)boolValue {
  return _kind == FLOATING ? _value.d != 0 : _value.u != 0;
}
- (NSInteger)integerValue {
  return (NSInteger)[self longLongValue];
}
- (NSUInteger)unsignedIntegerValue {
  return (NSUInteger)[self unsignedLongLongValue];
}

- (const char*)objCType {
  static const char* const encodings[] = {"c", "C", "s", "S", "i", "I", "q", "Q", "f", "d"};
  for (const char* encoding : encodings) {
    if (encoding[0] == _type) return encoding;
  }
  return "q";
}

- (NSString*)stringValue {
  return [self description];
}

- (NSString*)description {
  switch (_kind) {
    case SIGNED: return [NSString stringWithFormat:@"%lld", _value.s];
    case UNSIGNED: return [NSString stringWithFormat:@"%llu", _value.u];
    default: break;
  }
  // The shortest form that reads back as the same value: 3.5, 0.1, 1e+100.
  char text[32];
  for (int precision = _type == 'f' ? 6 : 15; precision <= 17; precision++) {
    std::snprintf(text, sizeof text, "%.*g", precision, _value.d);
    if (_type == 'f' ? std::strtof(text, nullptr) == (float)_value.d : std::strtod(text, nullptr) == _value.d) break;
  }
  return [NSString stringWithUTF8String:text];
}

- (NSComparisonResult)compare:(NSNumber*)other {
  if (!other) [NSException raise:NSInvalidArgumentException format:@"-[NSNumber compare:]: nil argument"];
  if (_kind == FLOATING || other->_kind == FLOATING) {
    double a = [self doubleValue], b = [other doubleValue];
    return a < b ? NSOrderedAscending : a > b ? NSOrderedDescending : NSOrderedSame;
  }
  if (_kind == SIGNED && _value.s < 0) {
    if (other->_kind == UNSIGNED) return NSOrderedAscending;
    return _value.s < other->_value.s ? NSOrderedAscending : _value.s > other->_value.s ? NSOrderedDescending : NSOrderedSame;
  }
  if (other->_kind == SIGNED && other->_value.s < 0) return NSOrderedDescending;
  unsigned long long a = _value.u, b = other->_value.u;  // both non-negative here
  return a < b ? NSOrderedAscending : a > b ? NSOrderedDescending : NSOrderedSame;
}

- (BOOL)isEqualToNumber:(NSNumber*)number {
  return number && [self compare:number] == NSOrderedSame;
}

- (BOOL)isEqual:(id)object {
  if (object == self) return YES;
  return [object isKindOfClass:[NSNumber class]] && [self isEqualToNumber:object];
}

// Integral values hash as their integer, whatever their kind, so that equal numbers hash alike.
- (NSUInteger)hash {
  unsigned long long bits;
  if (_kind != FLOATING) {
    bits = _value.u;
  } else if (std::nearbyint(_value.d) == _value.d && std::fabs(_value.d) < 9.2e18) {
    bits = (unsigned long long)(long long)_value.d;
  } else {
    std::memcpy(&bits, &_value.d, sizeof bits);
  }
  return NSUInteger(bits * 0x9E3779B97F4A7C15ull);
}

- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}

@end

@implementation NSNull

+ (NSNull*)null {
  static NSNull* instance = [[NSNull alloc] init];
  return instance;
}

- (instancetype)retain {
  return self;
}

- (oneway void)release {
}

- (instancetype)autorelease {
  return self;
}

- (NSUInteger)retainCount {
  return NSUIntegerMax;
}

- (id)copyWithZone:(NSZone*)zone {
  return self;
}

- (NSString*)description {
  return @"<null>";
}

@end
