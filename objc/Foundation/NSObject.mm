// NSObject, the Protocol class, blocks as objects, and Foundation's free functions (NSLog, NSStringFrom...).
#import "private.h"

#include <Block.h>
#include <Block_private.h>

#include <cstdio>
#include <cstring>
#include <mutex>

@implementation NSObject

+ (void)load {
}

+ (void)initialize {
}

+ (instancetype)alloc {
  return [self allocWithZone:NULL];
}

+ (instancetype)allocWithZone:(NSZone*)zone {
  return class_createInstance(self, 0);
}

+ (instancetype)new {
  return [[self alloc] init];
}

- (instancetype)init {
  return self;
}

- (void)dealloc {
  object_dispose(self);
}

- (instancetype)retain {
  objc_shimkit_retain(self);
  return self;
}

- (oneway void)release {
  if (objc_shimkit_release(self)) [self dealloc];
}

- (instancetype)autorelease {
  objc_shimkit_autorelease_add(self);
  return self;
}

- (NSUInteger)retainCount {
  return objc_shimkit_retain_count(self);
}

// Classes are never freed: counting their references would only cost.
+ (id)retain {
  return (id)self;
}

+ (oneway void)release {
}

+ (id)autorelease {
  return (id)self;
}

+ (NSUInteger)retainCount {
  return NSUIntegerMax;
}

- (NSZone*)zone {
  return NULL;
}

- (Class)class {
  return object_getClass(self);
}

+ (Class)class {
  return self;
}

- (Class)superclass {
  return class_getSuperclass(object_getClass(self));
}

+ (Class)superclass {
  return class_getSuperclass(self);
}

- (instancetype)self {
  return self;
}

- (BOOL)isProxy {
  return NO;
}

// For a class object too: its class is a metaclass, whose chain ends in the root class ([X isKindOfClass:[NSObject class]]).
- (BOOL)isKindOfClass:(Class)aClass {
  for (Class cls = object_getClass(self); cls; cls = class_getSuperclass(cls)) {
    if (cls == aClass) return YES;
  }
  return NO;
}

- (BOOL)isMemberOfClass:(Class)aClass {
  return object_getClass(self) == aClass;
}

+ (BOOL)isSubclassOfClass:(Class)aClass {
  for (Class cls = self; cls; cls = class_getSuperclass(cls)) {
    if (cls == aClass) return YES;
  }
  return NO;
}

- (BOOL)respondsToSelector:(SEL)aSelector {
  return aSelector && class_respondsToSelector(object_getClass(self), aSelector);
}

+ (BOOL)instancesRespondToSelector:(SEL)aSelector {
  return aSelector && class_respondsToSelector(self, aSelector);
}

+ (BOOL)conformsToProtocol:(Protocol*)protocol {
  for (Class cls = self; cls; cls = class_getSuperclass(cls)) {
    if (class_conformsToProtocol(cls, protocol)) return YES;
  }
  return NO;
}

- (BOOL)conformsToProtocol:(Protocol*)protocol {
  return [object_getClass(self) conformsToProtocol:protocol];
}

- (IMP)methodForSelector:(SEL)aSelector {
  return class_getMethodImplementation(object_getClass(self), aSelector);
}

+ (IMP)instanceMethodForSelector:(SEL)aSelector {
  return class_getMethodImplementation(self, aSelector);
}

- (id)performSelector:(SEL)aSelector {
  return ((id(*)(id, SEL))objc_msgSend)(self, aSelector);
}

- (id)performSelector:(SEL)aSelector withObject:(id)object {
  return ((id(*)(id, SEL, id))objc_msgSend)(self, aSelector, object);
}

- (id)performSelector:(SEL)aSelector withObject:(id)object1 withObject:(id)object2 {
  return ((id(*)(id, SEL, id, id))objc_msgSend)(self, aSelector, object1, object2);
}

- (void)doesNotRecognizeSelector:(SEL)aSelector {
  Class cls = object_getClass(self);
  BOOL isClass = class_isMetaClass(cls);
  [NSException raise:NSInvalidArgumentException
              format:@"%c[%s %s]: unrecognized selector sent to %s %p", isClass ? '+' : '-', class_getName(cls),
                     sel_getName(aSelector), isClass ? "class" : "instance", (void*)self];
}

- (id)forwardingTargetForSelector:(SEL)aSelector {
  return nil;
}

+ (BOOL)resolveClassMethod:(SEL)sel {
  return NO;
}

+ (BOOL)resolveInstanceMethod:(SEL)sel {
  return NO;
}

- (id)copy {
  return [(id<NSCopying>)self copyWithZone:NULL];
}

- (id)mutableCopy {
  return [(id<NSMutableCopying>)self mutableCopyWithZone:NULL];
}

// A class is its own copy: classes serve as dictionary keys.
+ (id)copyWithZone:(NSZone*)zone {
  return self;
}

+ (id)mutableCopyWithZone:(NSZone*)zone {
  return self;
}

- (NSUInteger)hash {
  return (NSUInteger)self;
}

+ (NSUInteger)hash {
  return (NSUInteger)self;
}

- (BOOL)isEqual:(id)object {
  return self == object;
}

+ (BOOL)isEqual:(id)object {
  return self == object;
}

- (NSString*)description {
  return [NSString stringWithFormat:@"<%s: %p>", class_getName(object_getClass(self)), (void*)self];
}

+ (NSString*)description {
  return NSStringFromClass(self);
}

- (NSString*)debugDescription {
  return [self description];
}

+ (NSString*)debugDescription {
  return [self description];
}

@end

// What @protocol(P) evaluates to. Protocols are static data: never counted, never freed.
@interface Protocol : NSObject
- (const char*)name;
- (BOOL)conformsTo:(Protocol*)other;
@end

@implementation Protocol

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

- (const char*)name {
  return protocol_getName(self);
}

- (BOOL)conformsTo:(Protocol*)other {
  return protocol_conformsToProtocol(self, other);
}

- (NSString*)description {
  return [NSString stringWithFormat:@"<Protocol: %s>", protocol_getName(self)];
}

@end

// -- Blocks as objects ------------------------------------------------------------------------------------------

// libBlocksRuntime reserves room for a class structure in each of its _NSConcrete*Block symbols (a block's isa
// points at one); the runtime fills them as subclasses of NSBlock, so [block copy], -retain, -release and
// -autorelease work, and blocks can be stored in collections. Unlike Apple's runtime, copying a block to the
// heap does not retain the objects it captures (libBlocksRuntime exports no hook for that).
extern "C" void objc_shimkit_install_block_class(void* storage, Class superclass, const char* name);

@interface NSBlock : NSObject
@end

// By its flags, not its class: Debian's libBlocksRuntime leaves a heap copy's isa as the stack block's.
static bool is_heap_block(id block) {
  return (reinterpret_cast<Block_layout*>(block)->flags & BLOCK_NEEDS_FREE) != 0;
}

@implementation NSBlock

+ (void)load {
  Class cls = [NSBlock class];
  objc_shimkit_install_block_class(_NSConcreteStackBlock, cls, "__NSStackBlock__");
  objc_shimkit_install_block_class(_NSConcreteGlobalBlock, cls, "__NSGlobalBlock__");
  objc_shimkit_install_block_class(_NSConcreteMallocBlock, cls, "__NSMallocBlock__");
  objc_shimkit_install_block_class(_NSConcreteAutoBlock, cls, "__NSAutoBlock__");
  objc_shimkit_install_block_class(_NSConcreteFinalizingBlock, cls, "__NSFinalizingBlock__");
  objc_shimkit_install_block_class(_NSConcreteWeakBlockVariable, cls, "__NSBlockVariable__");
}

- (id)copyWithZone:(NSZone*)zone {
  return (id)_Block_copy(self);
}

- (id)copy {
  return (id)_Block_copy(self);
}

// A stack block is not owned by anyone: -retain leaves it as it is (copy it to keep it), as on Apple.
- (instancetype)retain {
  return is_heap_block(self) ? (id)_Block_copy(self) : self;
}

- (oneway void)release {
  if (is_heap_block(self)) _Block_release(self);
}

- (instancetype)autorelease {
  if (is_heap_block(self)) objc_shimkit_autorelease_add(self);
  return self;
}

- (NSUInteger)retainCount {
  return 1;
}

@end

// -- Free functions ---------------------------------------------------------------------------------------------

void NSLogv(NSString* format, va_list args) {
  std::string line = shimkit_format(format, args);
  line += '\n';
  // One write per message, so that threads' messages do not interleave.
  static std::mutex* lock = new std::mutex;
  std::lock_guard<std::mutex> guard(*lock);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void NSLog(NSString* format, ...) {
  va_list args;
  va_start(args, format);
  NSLogv(format, args);
  va_end(args);
}

NSString* NSStringFromSelector(SEL selector) {
  return selector ? [NSString stringWithUTF8String:sel_getName(selector)] : nil;
}

SEL NSSelectorFromString(NSString* name) {
  return name ? sel_registerName([name UTF8String]) : NULL;
}

NSString* NSStringFromClass(Class cls) {
  return cls ? [NSString stringWithUTF8String:class_getName(cls)] : nil;
}

Class NSClassFromString(NSString* name) {
  return name ? objc_getClass([name UTF8String]) : Nil;
}

NSString* NSStringFromProtocol(Protocol* protocol) {
  return protocol ? [NSString stringWithUTF8String:protocol_getName(protocol)] : nil;
}

Protocol* NSProtocolFromString(NSString* name) {
  return name ? objc_getProtocol([name UTF8String]) : nil;
}

NSZone* NSDefaultMallocZone(void) {
  return NULL;
}
