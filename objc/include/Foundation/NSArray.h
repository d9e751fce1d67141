#pragma once
#include <Foundation/NSObject.h>
#include <Foundation/NSEnumerator.h>
#include <Foundation/NSRange.h>

@class NSString;

// Arrays retain their elements; nil is never an element (adding nil raises NSInvalidArgumentException), and an
// index out of range raises NSRangeException.
@interface NSArray<__covariant ObjectType> : NSObject <NSCopying, NSMutableCopying, NSFastEnumeration>
+ (instancetype)array;
+ (instancetype)arrayWithObject:(ObjectType)object;
+ (instancetype)arrayWithObjects:(const ObjectType[])objects count:(NSUInteger)count;
+ (instancetype)arrayWithObjects:(ObjectType)first, ... __attribute__((sentinel));
+ (instancetype)arrayWithArray:(NSArray<ObjectType>*)array;
- (instancetype)init;
- (instancetype)initWithObjects:(const ObjectType[])objects count:(NSUInteger)count;
- (instancetype)initWithObjects:(ObjectType)first, ... __attribute__((sentinel));
- (instancetype)initWithArray:(NSArray<ObjectType>*)array;
@property(readonly) NSUInteger count;
- (ObjectType)objectAtIndex:(NSUInteger)index;
- (ObjectType)objectAtIndexedSubscript:(NSUInteger)index;
@property(readonly) ObjectType firstObject;
@property(readonly) ObjectType lastObject;
- (BOOL)containsObject:(ObjectType)object;
- (NSUInteger)indexOfObject:(ObjectType)object;
- (NSUInteger)indexOfObjectIdenticalTo:(ObjectType)object;
- (BOOL)isEqualToArray:(NSArray<ObjectType>*)other;
- (NSArray<ObjectType>*)arrayByAddingObject:(ObjectType)object;
- (NSArray<ObjectType>*)arrayByAddingObjectsFromArray:(NSArray<ObjectType>*)other;
- (NSArray<ObjectType>*)subarrayWithRange:(NSRange)range;
- (NSString*)componentsJoinedByString:(NSString*)separator;
- (void)getObjects:(ObjectType __unsafe_unretained[])objects range:(NSRange)range;
- (void)enumerateObjectsUsingBlock:(void (^)(ObjectType object, NSUInteger index, BOOL* stop))block;
- (NSEnumerator<ObjectType>*)objectEnumerator;
- (void)makeObjectsPerformSelector:(SEL)selector;
@end

@interface NSMutableArray<ObjectType> : NSArray<ObjectType>
+ (instancetype)arrayWithCapacity:(NSUInteger)capacity;
- (instancetype)initWithCapacity:(NSUInteger)capacity;
- (void)addObject:(ObjectType)object;
- (void)addObjectsFromArray:(NSArray<ObjectType>*)array;
- (void)insertObject:(ObjectType)object atIndex:(NSUInteger)index;
- (void)removeLastObject;
- (void)removeObjectAtIndex:(NSUInteger)index;
- (void)removeObject:(ObjectType)object;
- (void)removeAllObjects;
- (void)replaceObjectAtIndex:(NSUInteger)index withObject:(ObjectType)object;
- (void)setObject:(ObjectType)object atIndexedSubscript:(NSUInteger)index;
@end
