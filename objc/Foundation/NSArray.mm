// NSArray, NSMutableArray and NSEnumerator.
#import "private.h"

#include <cstdlib>
#include <cstring>

// Both array classes share one storage: an NSArray is an NSMutableArray whose class has no mutators.
@interface NSArray () {
 @protected
  id* _items;
  NSUInteger _count;
  NSUInteger _capacity;
  unsigned long _mutations;  // what fast enumeration watches
}
@end

@interface NSShimkitArrayEnumerator : NSEnumerator {
  NSArray* _array;
  NSUInteger _next;
}
- (instancetype)initWithArray:(NSArray*)array;
@end

static void raise_index(const char* method, NSUInteger index, NSUInteger count) {
  if (count == 0)
    [NSException raise:NSRangeException format:@"*** %s: index %lu beyond bounds for empty array", method, (unsigned long)index];
  [NSException raise:NSRangeException format:@"*** %s: index %lu beyond bounds [0 .. %lu]", method, (unsigned long)index,
                                             (unsigned long)(count - 1)];
}

static void raise_nil(const char* method) {
  [NSException raise:NSInvalidArgumentException format:@"*** %s: object cannot be nil", method];
}

@implementation NSArray

+ (instancetype)array {
  return [[[self alloc] init] autorelease];
}

+ (instancetype)arrayWithObject:(id)object {
  return [[[self alloc] initWithObjects:&object count:1] autorelease];
}

+ (instancetype)arrayWithObjects:(const id[])objects count:(NSUInteger)count {
  return [[[self alloc] initWithObjects:objects count:count] autorelease];
}

+ (instancetype)arrayWithObjects:(id)first, ... {
  NSMutableArray* collected = [[NSMutableArray alloc] init];
  va_list args;
  va_start(args, first);
  for (id object = first; object; object = va_arg(args, id)) [collected addObject:object];
  va_end(args);
  NSArray* result = [[[self alloc] initWithArray:collected] autorelease];
  [collected release];
  return result;
}

+ (instancetype)arrayWithArray:(NSArray*)array {
  return [[[self alloc] initWithArray:array] autorelease];
}

- (instancetype)init {
  return [self initWithObjects:NULL count:0];
}

- (instancetype)initWithObjects:(const id[])objects count:(NSUInteger)count {
  self = [super init];
  for (NSUInteger i = 0; i < count; i++) {
    if (!objects[i]) {
      [self release];
      [NSException raise:NSInvalidArgumentException
                  format:@"*** -[NSArray initWithObjects:count:]: attempt to insert nil object from objects[%lu]", (unsigned long)i];
    }
  }
  _capacity = count;
  _items = count ? static_cast<id*>(std::malloc(count * sizeof(id))) : NULL;
  for (NSUInteger i = 0; i < count; i++) _items[i] = [objects[i] retain];
  _count = count;
  return self;
}

- (instancetype)initWithObjects:(id)first, ... {
  NSMutableArray* collected = [[NSMutableArray alloc] init];
  va_list args;
  va_start(args, first);
  for (id object = first; object; object = va_arg(args, id)) [collected addObject:object];
  va_end(args);
  self = [self initWithArray:collected];
  [collected release];
  return self;
}

- (instancetype)initWithArray:(NSArray*)array {
  return [self initWithObjects:array ? array->_items : NULL count:array ? array->_count : 0];
}

- (void)dealloc {
  for (NSUInteger i = 0; i < _count; i++) [_items[i] release];
  std::free(_items);
  [super dealloc];
}

- (NSUInteger)count {
  return _count;
}

- (id)objectAtIndex:(NSUInteger)index {
  if (index >= _count) raise_index("-[NSArray objectAtIndex:]", index, _count);
  return _items[index];
}

- (id)objectAtIndexedSubscript:(NSUInteger)index {
  if (index >= _count) raise_index("-[NSArray objectAtIndexedSubscript:]", index, _count);
  return _items[index];
}

- (id)firstObject {
  return _count ? _items[0] : nil;
}

- (id)lastObject {
  return _count ? _items[_count - 1] : nil;
}

- (NSUInteger)indexOfObject:(id)object {
  for (NSUInteger i = 0; i < _count; i++) {
    if (_items[i] == object || [_items[i] isEqual:object]) return i;
  }
  return NSNotFound;
}

- (NSUInteger)indexOfObjectIdenticalTo:(id)object {
  for (NSUInteger i = 0; i < _count; i++) {
    if (_items[i] == object) return i;
  }
  return NSNotFound;
}

- (BOOL)containsObject:(id)object {
  return [self indexOfObject:object] != NSNotFound;
}

- (BOOL)isEqualToArray:(NSArray*)other {
  if (other == self) return YES;
  if (!other || other->_count != _count) return NO;
  for (NSUInteger i = 0; i < _count; i++) {
    if (_items[i] != other->_items[i] && ![_items[i] isEqual:other->_items[i]]) return NO;
  }
  return YES;
}

- (BOOL)isEqual:(id)object {
  return [object isKindOfClass:[NSArray class]] && [self isEqualToArray:object];
}

- (NSUInteger)hash {
  return _count;
}

- (NSArray*)arrayByAddingObject:(id)object {
  if (!object) raise_nil("-[NSArray arrayByAddingObject:]");
  NSMutableArray* result = [NSMutableArray arrayWithArray:self];
  [result addObject:object];
  return [NSArray arrayWithArray:result];
}

- (NSArray*)arrayByAddingObjectsFromArray:(NSArray*)other {
  NSMutableArray* result = [NSMutableArray arrayWithArray:self];
  [result addObjectsFromArray:other];
  return [NSArray arrayWithArray:result];
}

- (NSArray*)subarrayWithRange:(NSRange)range {
  if (range.location > _count || range.length > _count - range.location)
    raise_index("-[NSArray subarrayWithRange:]", NSMaxRange(range), _count);
  return [NSArray arrayWithObjects:_items + range.location count:range.length];
}

- (void)getObjects:(id __unsafe_unretained[])objects range:(NSRange)range {
  if (range.location > _count || range.length > _count - range.location)
    raise_index("-[NSArray getObjects:range:]", NSMaxRange(range), _count);
  for (NSUInteger i = 0; i < range.length; i++) objects[i] = _items[range.location + i];
}

- (NSString*)componentsJoinedByString:(NSString*)separator {
  NSMutableString* result = [NSMutableString string];
  for (NSUInteger i = 0; i < _count; i++) {
    if (i && separator) [result appendString:separator];
    [result appendString:[_items[i] description]];
  }
  return [NSString stringWithString:result];
}

- (void)enumerateObjectsUsingBlock:(void (^)(id, NSUInteger, BOOL*))block {
  BOOL stop = NO;
  for (NSUInteger i = 0; i < _count && !stop; i++) block(_items[i], i, &stop);
}

- (NSEnumerator*)objectEnumerator {
  return [[[NSShimkitArrayEnumerator alloc] initWithArray:self] autorelease];
}

- (void)makeObjectsPerformSelector:(SEL)selector {
  for (NSUInteger i = 0; i < _count; i++) [_items[i] performSelector:selector];
}

- (NSString*)description {
  NSMutableString* text = [NSMutableString stringWithString:@"("];
  for (NSUInteger i = 0; i < _count; i++) [text appendFormat:@"%s\n    %@", i ? "," : "", _items[i]];
  [text appendString:_count ? @"\n)" : @")"];
  return [NSString stringWithString:text];
}

// The items in place: the loop reads them directly, and stops with NSGenericException if the array changes.
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(id __unsafe_unretained[])buffer
                                    count:(NSUInteger)length {
  if (state->state != 0) return 0;
  state->state = 1;
  state->mutationsPtr = &_mutations;
  state->itemsPtr = _items;
  return _count;
}

- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}

- (id)mutableCopyWithZone:(NSZone*)zone {
  return [[NSMutableArray alloc] initWithArray:self];
}

@end

@implementation NSMutableArray

+ (instancetype)arrayWithCapacity:(NSUInteger)capacity {
  return [[[self alloc] initWithCapacity:capacity] autorelease];
}

- (instancetype)initWithCapacity:(NSUInteger)capacity {
  self = [self initWithObjects:NULL count:0];
  _capacity = capacity;
  _items = capacity ? static_cast<id*>(std::malloc(capacity * sizeof(id))) : NULL;
  return self;
}

static void reserve(id* items[], NSUInteger* capacity, NSUInteger needed) {
  if (needed <= *capacity) return;
  NSUInteger grown = *capacity ? *capacity * 2 : 8;
  if (grown < needed) grown = needed;
  *items = static_cast<id*>(std::realloc(*items, grown * sizeof(id)));
  *capacity = grown;
}

- (void)addObject:(id)object {
  [self insertObject:object atIndex:_count];
}

- (void)addObjectsFromArray:(NSArray*)array {
  for (id object in array) [self addObject:object];
}

- (void)insertObject:(id)object atIndex:(NSUInteger)index {
  if (!object) raise_nil("-[NSMutableArray insertObject:atIndex:]");
  if (index > _count) raise_index("-[NSMutableArray insertObject:atIndex:]", index, _count);
  reserve(&_items, &_capacity, _count + 1);
  std::memmove(_items + index + 1, _items + index, (_count - index) * sizeof(id));
  _items[index] = [object retain];
  _count++;
  _mutations++;
}

- (void)removeObjectAtIndex:(NSUInteger)index {
  if (index >= _count) raise_index("-[NSMutableArray removeObjectAtIndex:]", index, _count);
  id removed = _items[index];
  std::memmove(_items + index, _items + index + 1, (_count - index - 1) * sizeof(id));
  _count--;
  _mutations++;
  [removed release];
}

- (void)removeLastObject {
  if (_count) [self removeObjectAtIndex:_count - 1];
}

- (void)removeObject:(id)object {
  for (NSUInteger i = _count; i-- > 0;) {
    if (_items[i] == object || [_items[i] isEqual:object]) [self removeObjectAtIndex:i];
  }
}

- (void)removeAllObjects {
  while (_count) [self removeObjectAtIndex:_count - 1];
}

- (void)replaceObjectAtIndex:(NSUInteger)index withObject:(id)object {
  if (!object) raise_nil("-[NSMutableArray replaceObjectAtIndex:withObject:]");
  if (index >= _count) raise_index("-[NSMutableArray replaceObjectAtIndex:withObject:]", index, _count);
  id old = _items[index];
  _items[index] = [object retain];
  _mutations++;
  [old release];
}

- (void)setObject:(id)object atIndexedSubscript:(NSUInteger)index {
  if (index == _count) [self addObject:object];
  else [self replaceObjectAtIndex:index withObject:object];
}

- (id)copyWithZone:(NSZone*)zone {
  return [[NSArray alloc] initWithArray:self];
}

@end

// -- Enumerators ------------------------------------------------------------------------------------------------

@implementation NSEnumerator

- (id)nextObject {
  return nil;
}

- (NSArray*)allObjects {
  NSMutableArray* rest = [NSMutableArray array];
  for (id object; (object = [self nextObject]);) [rest addObject:object];
  return [NSArray arrayWithArray:rest];
}

- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(id __unsafe_unretained[])buffer
                                    count:(NSUInteger)length {
  // An enumerator cannot tell whether its source changed: the mutations word never moves.
  state->mutationsPtr = &state->extra[0];
  state->itemsPtr = buffer;
  NSUInteger filled = 0;
  for (id object; filled < length && (object = [self nextObject]);) buffer[filled++] = object;
  return filled;
}

@end

@implementation NSShimkitArrayEnumerator

- (instancetype)initWithArray:(NSArray*)array {
  self = [super init];
  _array = [array retain];
  return self;
}

- (void)dealloc {
  [_array release];
  [super dealloc];
}

- (id)nextObject {
  return _next < [_array count] ? [_array objectAtIndex:_next++] : nil;
}

@end
