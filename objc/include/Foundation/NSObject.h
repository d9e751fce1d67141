// NSObject: the root class and protocol, and the copying protocols.
//
// Memory management is manual (no ARC): +alloc/+new/-copy/-mutableCopy return an object the caller owns
// (count 1); -release drops a reference and sends -dealloc at zero; -autorelease releases at the end of the
// innermost @autoreleasepool of the thread. Subclasses override -dealloc to release what they own and end it
// with [super dealloc].
#pragma once
#include <Foundation/NSObjCRuntime.h>
#include <Foundation/NSZone.h>

@class NSString, NSMethodSignature, NSInvocation;

@protocol NSObject
- (BOOL)isEqual:(id)object;
@property(readonly) NSUInteger hash;
@property(readonly) Class superclass;
- (Class)class;
- (instancetype)self;
- (id)performSelector:(SEL)aSelector;
- (id)performSelector:(SEL)aSelector withObject:(id)object;
- (id)performSelector:(SEL)aSelector withObject:(id)object1 withObject:(id)object2;
- (BOOL)isProxy;
- (BOOL)isKindOfClass:(Class)aClass;
- (BOOL)isMemberOfClass:(Class)aClass;
- (BOOL)conformsToProtocol:(Protocol*)aProtocol;
- (BOOL)respondsToSelector:(SEL)aSelector;
- (instancetype)retain;
- (oneway void)release;
- (instancetype)autorelease;
- (NSUInteger)retainCount;
- (NSZone*)zone;
@property(readonly, copy) NSString* description;
@optional
@property(readonly, copy) NSString* debugDescription;
@end

NS_ROOT_CLASS
@interface NSObject <NSObject> {
  Class isa;
}
+ (void)load;
// Sent once to each class, before its first message (or its subclass's), superclass first.
+ (void)initialize;
- (instancetype)init;
+ (instancetype)new;
+ (instancetype)allocWithZone:(NSZone*)zone;
+ (instancetype)alloc;
- (void)dealloc;
// [self copyWithZone:NULL]: the class must conform to NSCopying.
- (id)copy;
- (id)mutableCopy;
+ (id)copyWithZone:(NSZone*)zone;
+ (id)mutableCopyWithZone:(NSZone*)zone;
+ (BOOL)instancesRespondToSelector:(SEL)aSelector;
+ (BOOL)conformsToProtocol:(Protocol*)protocol;
- (IMP)methodForSelector:(SEL)aSelector;
+ (IMP)instanceMethodForSelector:(SEL)aSelector;
// Raises NSInvalidArgumentException naming the selector: what an unrecognised message ends in.
- (void)doesNotRecognizeSelector:(SEL)aSelector;
- (id)forwardingTargetForSelector:(SEL)aSelector;
+ (BOOL)isSubclassOfClass:(Class)aClass;
+ (BOOL)resolveClassMethod:(SEL)sel;
+ (BOOL)resolveInstanceMethod:(SEL)sel;
+ (NSUInteger)hash;
+ (Class)superclass;
+ (Class)class;
+ (NSString*)description;
+ (NSString*)debugDescription;
+ (BOOL)isEqual:(id)object;
@end

@protocol NSCopying
- (id)copyWithZone:(NSZone*)zone;
@end

@protocol NSMutableCopying
- (id)mutableCopyWithZone:(NSZone*)zone;
@end

@protocol NSCoding
@end
@protocol NSSecureCoding <NSCoding>
@end
