// NSData and NSMutableData.
#import "private.h"

#include <Block.h>

#include <cstdlib>
#include <cstring>

@interface NSData () {
 @protected
  unsigned char* _bytes;
  NSUInteger _length;
  NSUInteger _capacity;  // NSMutableData's
  BOOL _freeWhenDone;
  void (^_deallocator)(void*, NSUInteger);
}
@end

@implementation NSData

+ (instancetype)data {
  return [[[self alloc] init] autorelease];
}

+ (instancetype)dataWithBytes:(const void*)bytes length:(NSUInteger)length {
  return [[[self alloc] initWithBytes:bytes length:length] autorelease];
}

+ (instancetype)dataWithBytesNoCopy:(void*)bytes length:(NSUInteger)length {
  return [[[self alloc] initWithBytesNoCopy:bytes length:length freeWhenDone:YES] autorelease];
}

+ (instancetype)dataWithBytesNoCopy:(void*)bytes length:(NSUInteger)length freeWhenDone:(BOOL)freeWhenDone {
  return [[[self alloc] initWithBytesNoCopy:bytes length:length freeWhenDone:freeWhenDone] autorelease];
}

+ (instancetype)dataWithData:(NSData*)data {
  return [[[self alloc] initWithData:data] autorelease];
}

- (instancetype)init {
  return [self initWithBytes:NULL length:0];
}

- (instancetype)initWithBytes:(const void*)bytes length:(NSUInteger)length {
  void* copy = std::malloc(length ? length : 1);
  if (length) std::memcpy(copy, bytes, length);
  self = [self initWithBytesNoCopy:copy length:length freeWhenDone:YES];
  _capacity = length;
  return self;
}

- (instancetype)initWithBytesNoCopy:(void*)bytes length:(NSUInteger)length freeWhenDone:(BOOL)freeWhenDone {
  self = [super init];
  _bytes = static_cast<unsigned char*>(bytes);
  _length = length;
  _freeWhenDone = freeWhenDone;
  return self;
}

- (instancetype)initWithBytesNoCopy:(void*)bytes length:(NSUInteger)length deallocator:(void (^)(void*, NSUInteger))deallocator {
  self = [self initWithBytesNoCopy:bytes length:length freeWhenDone:NO];
  if (deallocator) _deallocator = Block_copy(deallocator);
  return self;
}

- (instancetype)initWithData:(NSData*)data {
  return [self initWithBytes:[data bytes] length:[data length]];
}

- (void)dealloc {
  if (_deallocator) {
    _deallocator(_bytes, _length);
    Block_release(_deallocator);
  } else if (_freeWhenDone) {
    std::free(_bytes);
  }
  [super dealloc];
}

- (const void*)bytes {
  return _bytes;
}

- (NSUInteger)length {
  return _length;
}

- (void)getBytes:(void*)buffer length:(NSUInteger)length {
  std::memcpy(buffer, _bytes, MIN(length, _length));
}

- (void)getBytes:(void*)buffer range:(NSRange)range {
  if (range.location > _length || range.length > _length - range.location)
    [NSException raise:NSRangeException format:@"-[NSData getBytes:range:]: range {%lu, %lu} exceeds data length %lu",
                                               (unsigned long)range.location, (unsigned long)range.length, (unsigned long)_length];
  std::memcpy(buffer, _bytes + range.location, range.length);
}

- (BOOL)isEqualToData:(NSData*)other {
  return other && other->_length == _length && (_length == 0 || std::memcmp(other->_bytes, _bytes, _length) == 0);
}

- (BOOL)isEqual:(id)object {
  return [object isKindOfClass:[NSData class]] && [self isEqualToData:object];
}

- (NSUInteger)hash {
  return shimkit_hash_bytes(_bytes, MIN(_length, NSUInteger(80)));
}

- (NSString*)description {
  return [NSString stringWithFormat:@"<%s: %p; %lu bytes>", object_getClassName(self), (void*)self, (unsigned long)_length];
}

- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}

- (id)mutableCopyWithZone:(NSZone*)zone {
  return [[NSMutableData alloc] initWithData:self];
}

@end

@interface NSMutableData ()
- (void)shimkit_reserve:(NSUInteger)needed;
@end

@implementation NSMutableData

+ (instancetype)dataWithCapacity:(NSUInteger)capacity {
  return [[[self alloc] initWithCapacity:capacity] autorelease];
}

+ (instancetype)dataWithLength:(NSUInteger)length {
  return [[[self alloc] initWithLength:length] autorelease];
}

- (instancetype)initWithCapacity:(NSUInteger)capacity {
  self = [self initWithBytes:NULL length:0];
  [self shimkit_reserve:capacity];
  return self;
}

- (instancetype)initWithLength:(NSUInteger)length {
  self = [self initWithCapacity:length];
  [self setLength:length];
  return self;
}

// Mutable data always owns a malloc'd buffer: bytes taken without copying are copied here first.
- (void)shimkit_reserve:(NSUInteger)needed {
  if (!_freeWhenDone || _deallocator) {
    unsigned char* owned = static_cast<unsigned char*>(std::malloc(_length ? _length : 1));
    if (_length) std::memcpy(owned, _bytes, _length);
    if (_deallocator) {
      _deallocator(_bytes, _length);
      Block_release(_deallocator);
      _deallocator = nil;
    }
    _bytes = owned;
    _capacity = _length;
    _freeWhenDone = YES;
  }
  if (needed <= _capacity) return;
  NSUInteger grown = MAX(needed, _capacity * 2);
  _bytes = static_cast<unsigned char*>(std::realloc(_bytes, grown ? grown : 1));
  _capacity = grown;
}

- (instancetype)initWithBytesNoCopy:(void*)bytes length:(NSUInteger)length freeWhenDone:(BOOL)freeWhenDone {
  self = [super initWithBytesNoCopy:bytes length:length freeWhenDone:freeWhenDone];
  _capacity = freeWhenDone ? length : 0;
  return self;
}

- (void*)mutableBytes {
  [self shimkit_reserve:_length];
  return _bytes;
}

- (void)setLength:(NSUInteger)length {
  [self shimkit_reserve:length];
  if (length > _length) std::memset(_bytes + _length, 0, length - _length);
  _length = length;
}

- (NSUInteger)length {
  return _length;
}

- (void)appendBytes:(const void*)bytes length:(NSUInteger)length {
  [self shimkit_reserve:_length + length];
  std::memcpy(_bytes + _length, bytes, length);
  _length += length;
}

- (void)appendData:(NSData*)other {
  [self appendBytes:[other bytes] length:[other length]];
}

- (void)increaseLengthBy:(NSUInteger)extraLength {
  [self setLength:_length + extraLength];
}

- (void)replaceBytesInRange:(NSRange)range withBytes:(const void*)bytes {
  if (range.location > _length)
    [NSException raise:NSRangeException format:@"-[NSMutableData replaceBytesInRange:withBytes:]: location %lu beyond length %lu",
                                               (unsigned long)range.location, (unsigned long)_length];
  if (NSMaxRange(range) > _length) [self setLength:NSMaxRange(range)];
  std::memcpy(_bytes + range.location, bytes, range.length);
}

- (id)copyWithZone:(NSZone*)zone {
  return [[NSData alloc] initWithData:self];
}

@end
