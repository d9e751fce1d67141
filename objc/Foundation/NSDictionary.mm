// NSDictionary and NSMutableDictionary: a hash index over entries kept in insertion order.
#import "private.h"

#include <unordered_map>
#include <vector>

namespace {

struct KeyHash {
  size_t operator()(id key) const { return [key hash]; }
};

struct KeyEqual {
  bool operator()(id a, id b) const { return a == b || [a isEqual:b]; }
};

struct Entry {
  id key;  // nil once removed
  id value;
};

struct Storage {
  std::vector<Entry> entries;
  std::unordered_map<id, size_t, KeyHash, KeyEqual> index;  // key -> its entry

  // Removed entries leave holes; the entries are packed again once holes outnumber them.
  void compact() {
    if (entries.size() < 16 || index.size() * 2 > entries.size()) return;
    std::vector<Entry> packed;
    packed.reserve(index.size());
    for (const Entry& entry : entries) {
      if (entry.key) packed.push_back(entry);
    }
    entries.swap(packed);
    for (size_t i = 0; i < entries.size(); i++) index[entries[i].key] = i;
  }
};

}  // namespace

@interface NSDictionary () {
 @protected
  Storage* _storage;
  unsigned long _mutations;
}
- (void)shimkit_setObject:(id)object forKey:(id)key;
- (void)shimkit_removeObjectForKey:(id)key;
@end

@interface NSShimkitSnapshotEnumerator : NSEnumerator {
  NSArray* _objects;
  NSUInteger _next;
}
- (instancetype)initWithArray:(NSArray*)objects;
@end

@implementation NSDictionary

+ (instancetype)dictionary {
  return [[[self alloc] init] autorelease];
}

+ (instancetype)dictionaryWithObject:(id)object forKey:(id<NSCopying>)key {
  return [[[self alloc] initWithObjects:&object forKeys:&key count:1] autorelease];
}

+ (instancetype)dictionaryWithObjects:(const id[])objects forKeys:(const id<NSCopying>[])keys count:(NSUInteger)count {
  return [[[self alloc] initWithObjects:objects forKeys:keys count:count] autorelease];
}

+ (instancetype)dictionaryWithObjects:(NSArray*)objects forKeys:(NSArray*)keys {
  if ([objects count] != [keys count])
    [NSException raise:NSInvalidArgumentException
                format:@"*** +[NSDictionary dictionaryWithObjects:forKeys:]: count of objects (%lu) differs from count of keys (%lu)",
                       (unsigned long)[objects count], (unsigned long)[keys count]];
  NSDictionary* result = [[[self alloc] init] autorelease];
  for (NSUInteger i = 0; i < [keys count]; i++) [result shimkit_setObject:objects[i] forKey:keys[i]];
  return result;
}

+ (instancetype)dictionaryWithObjectsAndKeys:(id)first, ... {
  NSDictionary* result = [[[self alloc] init] autorelease];
  va_list args;
  va_start(args, first);
  for (id object = first; object; object = va_arg(args, id)) [result shimkit_setObject:object forKey:va_arg(args, id)];
  va_end(args);
  return result;
}

+ (instancetype)dictionaryWithDictionary:(NSDictionary*)dictionary {
  return [[[self alloc] initWithDictionary:dictionary] autorelease];
}

- (instancetype)init {
  self = [super init];
  _storage = new Storage;
  return self;
}

- (instancetype)initWithObjects:(const id[])objects forKeys:(const id<NSCopying>[])keys count:(NSUInteger)count {
  self = [self init];
  for (NSUInteger i = 0; i < count; i++) {
    if (!objects[i] || !keys[i]) {
      [self release];
      [NSException raise:NSInvalidArgumentException
                  format:@"*** -[NSDictionary initWithObjects:forKeys:count:]: attempt to insert nil %s from %s[%lu]",
                         objects[i] ? "key" : "object", objects[i] ? "keys" : "objects", (unsigned long)i];
    }
    [self shimkit_setObject:objects[i] forKey:keys[i]];
  }
  return self;
}

- (instancetype)initWithDictionary:(NSDictionary*)dictionary {
  self = [self init];
  if (dictionary) {
    for (const Entry& entry : dictionary->_storage->entries) {
      if (entry.key) [self shimkit_setObject:entry.value forKey:entry.key];
    }
  }
  return self;
}

- (void)dealloc {
  if (_storage) {
    for (Entry& entry : _storage->entries) {
      [entry.key release];
      [entry.value release];
    }
    delete _storage;
  }
  [super dealloc];
}

// As on Apple, the dictionary keeps a copy of the key (a key copies itself by -copyWithZone:; one that does not
// conform to NSCopying is kept as it is), and replacing a value keeps the key already there.
- (void)shimkit_setObject:(id)object forKey:(id)key {
  if (!key) [NSException raise:NSInvalidArgumentException format:@"*** setObject:forKey: key cannot be nil"];
  if (!object) [NSException raise:NSInvalidArgumentException format:@"*** setObject:forKey: object cannot be nil (key: %@)", key];
  [object retain];
  auto found = _storage->index.find(key);
  _mutations++;
  if (found != _storage->index.end()) {
    Entry& entry = _storage->entries[found->second];
    id old = entry.value;
    entry.value = object;
    [old release];
    return;
  }
  id stored = [key conformsToProtocol:@protocol(NSCopying)] ? [key copy] : [key retain];
  _storage->entries.push_back(Entry{stored, object});
  _storage->index.emplace(stored, _storage->entries.size() - 1);
}

- (void)shimkit_removeObjectForKey:(id)key {
  if (!key) return;
  auto found = _storage->index.find(key);
  if (found == _storage->index.end()) return;
  Entry removed = _storage->entries[found->second];
  _storage->entries[found->second] = Entry{nil, nil};
  _storage->index.erase(found);
  _storage->compact();
  _mutations++;
  [removed.key release];
  [removed.value release];
}

- (NSUInteger)count {
  return _storage->index.size();
}

- (id)objectForKey:(id)key {
  if (!key) return nil;
  auto found = _storage->index.find(key);
  return found == _storage->index.end() ? nil : _storage->entries[found->second].value;
}

- (id)objectForKeyedSubscript:(id)key {
  return [self objectForKey:key];
}

- (NSArray*)allKeys {
  NSMutableArray* keys = [NSMutableArray arrayWithCapacity:[self count]];
  for (const Entry& entry : _storage->entries) {
    if (entry.key) [keys addObject:entry.key];
  }
  return [NSArray arrayWithArray:keys];
}

- (NSArray*)allValues {
  NSMutableArray* values = [NSMutableArray arrayWithCapacity:[self count]];
  for (const Entry& entry : _storage->entries) {
    if (entry.key) [values addObject:entry.value];
  }
  return [NSArray arrayWithArray:values];
}

- (NSEnumerator*)keyEnumerator {
  return [[[NSShimkitSnapshotEnumerator alloc] initWithArray:[self allKeys]] autorelease];
}

- (NSEnumerator*)objectEnumerator {
  return [[[NSShimkitSnapshotEnumerator alloc] initWithArray:[self allValues]] autorelease];
}

- (void)enumerateKeysAndObjectsUsingBlock:(void (^)(id, id, BOOL*))block {
  BOOL stop = NO;
  unsigned long mutations = _mutations;
  for (size_t i = 0; i < _storage->entries.size() && !stop; i++) {
    Entry entry = _storage->entries[i];
    if (entry.key) block(entry.key, entry.value, &stop);
    if (mutations != _mutations) objc_enumerationMutation(self);
  }
}

- (BOOL)isEqualToDictionary:(NSDictionary*)other {
  if (other == self) return YES;
  if (!other || [other count] != [self count]) return NO;
  for (const Entry& entry : _storage->entries) {
    if (!entry.key) continue;
    id theirs = [other objectForKey:entry.key];
    if (!theirs || (theirs != entry.value && ![theirs isEqual:entry.value])) return NO;
  }
  return YES;
}

- (BOOL)isEqual:(id)object {
  return [object isKindOfClass:[NSDictionary class]] && [self isEqualToDictionary:object];
}

- (NSUInteger)hash {
  return [self count];
}

- (NSString*)description {
  NSMutableString* text = [NSMutableString stringWithString:@"{"];
  for (const Entry& entry : _storage->entries) {
    if (entry.key) [text appendFormat:@"\n    %@ = %@;", entry.key, entry.value];
  }
  [text appendString:[self count] ? @"\n}" : @"}"];
  return [NSString stringWithString:text];
}

// Keys in insertion order, a buffer at a time; state->state is the next entry to look at.
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(id __unsafe_unretained[])buffer
                                    count:(NSUInteger)length {
  state->mutationsPtr = &_mutations;
  state->itemsPtr = buffer;
  NSUInteger filled = 0;
  size_t position = state->state;
  while (filled < length && position < _storage->entries.size()) {
    if (id key = _storage->entries[position].key) buffer[filled++] = key;
    position++;
  }
  state->state = position;
  return filled;
}

- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}

- (id)mutableCopyWithZone:(NSZone*)zone {
  return [[NSMutableDictionary alloc] initWithDictionary:self];
}

@end

@implementation NSMutableDictionary

+ (instancetype)dictionaryWithCapacity:(NSUInteger)capacity {
  return [[[self alloc] initWithCapacity:capacity] autorelease];
}

- (instancetype)initWithCapacity:(NSUInteger)capacity {
  self = [self init];
  _storage->entries.reserve(capacity);
  _storage->index.reserve(capacity);
  return self;
}

- (void)setObject:(id)object forKey:(id<NSCopying>)key {
  [self shimkit_setObject:object forKey:key];
}

// dictionary[key] = nil removes the key, as on Apple.
- (void)setObject:(id)object forKeyedSubscript:(id<NSCopying>)key {
  if (object) [self shimkit_setObject:object forKey:key];
  else [self shimkit_removeObjectForKey:key];
}

- (void)removeObjectForKey:(id)key {
  if (!key) [NSException raise:NSInvalidArgumentException format:@"*** -[NSMutableDictionary removeObjectForKey:]: key cannot be nil"];
  [self shimkit_removeObjectForKey:key];
}

- (void)removeAllObjects {
  Storage* old = _storage;
  _storage = new Storage;
  _mutations++;
  for (Entry& entry : old->entries) {
    [entry.key release];
    [entry.value release];
  }
  delete old;
}

- (void)addEntriesFromDictionary:(NSDictionary*)other {
  for (id key in other) [self shimkit_setObject:[other objectForKey:key] forKey:key];
}

- (id)copyWithZone:(NSZone*)zone {
  return [[NSDictionary alloc] initWithDictionary:self];
}

@end

@implementation NSShimkitSnapshotEnumerator

- (instancetype)initWithArray:(NSArray*)objects {
  self = [super init];
  _objects = [objects retain];
  return self;
}

- (void)dealloc {
  [_objects release];
  [super dealloc];
}

- (id)nextObject {
  return _next < [_objects count] ? [_objects objectAtIndex:_next++] : nil;
}

@end
