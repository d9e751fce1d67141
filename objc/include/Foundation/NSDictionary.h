#pragma once
#include <Foundation/NSObject.h>
#include <Foundation/NSEnumerator.h>

@class NSArray<__covariant ObjectType>, NSString;

// Keys are compared with -isEqual: and -hash (NSObject's are identity) and COPIED on insertion, as on Apple: a
// key must conform to NSCopying (a class whose objects are keys by identity implements -copyWithZone: as
// `return [self retain];`). Values are retained. Fast enumeration and allKeys go in insertion order.
@interface NSDictionary<__covariant KeyType, __covariant ObjectType> : NSObject <NSCopying, NSMutableCopying, NSFastEnumeration>
+ (instancetype)dictionary;
+ (instancetype)dictionaryWithObject:(ObjectType)object forKey:(KeyType<NSCopying>)key;
+ (instancetype)dictionaryWithObjects:(const ObjectType[])objects
                              forKeys:(const KeyType<NSCopying>[])keys
                                count:(NSUInteger)count;
+ (instancetype)dictionaryWithObjects:(NSArray<ObjectType>*)objects forKeys:(NSArray<KeyType<NSCopying>>*)keys;
+ (instancetype)dictionaryWithObjectsAndKeys:(id)first, ... __attribute__((sentinel));
+ (instancetype)dictionaryWithDictionary:(NSDictionary<KeyType, ObjectType>*)dictionary;
- (instancetype)init;
- (instancetype)initWithObjects:(const ObjectType[])objects
                        forKeys:(const KeyType<NSCopying>[])keys
                          count:(NSUInteger)count;
- (instancetype)initWithDictionary:(NSDictionary<KeyType, ObjectType>*)dictionary;
@property(readonly) NSUInteger count;
- (ObjectType)objectForKey:(KeyType)key;
- (ObjectType)objectForKeyedSubscript:(KeyType)key;
@property(readonly, copy) NSArray<KeyType>* allKeys;
@property(readonly, copy) NSArray<ObjectType>* allValues;
- (NSEnumerator<KeyType>*)keyEnumerator;
- (NSEnumerator<ObjectType>*)objectEnumerator;
- (BOOL)isEqualToDictionary:(NSDictionary<KeyType, ObjectType>*)other;
- (void)enumerateKeysAndObjectsUsingBlock:(void (^)(KeyType key, ObjectType object, BOOL* stop))block;
@end

@interface NSMutableDictionary<KeyType, ObjectType> : NSDictionary<KeyType, ObjectType>
+ (instancetype)dictionaryWithCapacity:(NSUInteger)capacity;
- (instancetype)initWithCapacity:(NSUInteger)capacity;
- (void)setObject:(ObjectType)object forKey:(KeyType<NSCopying>)key;
- (void)setObject:(ObjectType)object forKeyedSubscript:(KeyType<NSCopying>)key;
- (void)removeObjectForKey:(KeyType)key;
- (void)removeAllObjects;
- (void)addEntriesFromDictionary:(NSDictionary<KeyType, ObjectType>*)other;
@end
