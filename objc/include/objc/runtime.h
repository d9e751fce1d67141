// The public functions of shimkit's Objective-C runtime: introspection, dynamic dispatch, the calls clang's
// GNUstep 2.0 code generation emits, and autorelease pools.
#pragma once

#include <objc/objc.h>

#ifdef __cplusplus
extern "C" {
#endif

// -- Dispatch ------------------------------------------------------------------------------------------------
// Cast to the method's real type before calling, e.g. ((int (*)(id, SEL, int))objc_msgSend)(obj, sel, 3).
// objc_msgSend_stret is for methods returning a struct in memory: cast it to the method's type with the result
// pointer first, ((struct Big (*)(id, SEL))objc_msgSend_stret)(obj, sel) in C's terms.
OBJC_PUBLIC id objc_msgSend(id self, SEL op, ...);
OBJC_PUBLIC void objc_msgSend_stret(id self, SEL op, ...);
OBJC_PUBLIC IMP objc_msg_lookup(id receiver, SEL op);
struct objc_super { id receiver; Class super_class; };
OBJC_PUBLIC IMP objc_msg_lookup_super(struct objc_super* super, SEL op);

// -- Selectors -----------------------------------------------------------------------------------------------
OBJC_PUBLIC SEL sel_registerName(const char* name);
OBJC_PUBLIC SEL sel_getUid(const char* name);
OBJC_PUBLIC const char* sel_getName(SEL sel);
OBJC_PUBLIC BOOL sel_isEqual(SEL a, SEL b);

// -- Classes and objects -------------------------------------------------------------------------------------
OBJC_PUBLIC Class objc_getClass(const char* name);
OBJC_PUBLIC Class objc_lookUpClass(const char* name);
OBJC_PUBLIC Class objc_getMetaClass(const char* name);
OBJC_PUBLIC const char* class_getName(Class cls);
OBJC_PUBLIC Class class_getSuperclass(Class cls);
OBJC_PUBLIC BOOL class_isMetaClass(Class cls);
OBJC_PUBLIC size_t class_getInstanceSize(Class cls);
OBJC_PUBLIC BOOL class_respondsToSelector(Class cls, SEL sel);
OBJC_PUBLIC Method class_getInstanceMethod(Class cls, SEL sel);
OBJC_PUBLIC Method class_getClassMethod(Class cls, SEL sel);
OBJC_PUBLIC IMP class_getMethodImplementation(Class cls, SEL sel);
// Adds (or, for class_replaceMethod, replaces) a method at run time; returns the IMP replaced, if any.
OBJC_PUBLIC BOOL class_addMethod(Class cls, SEL name, IMP imp, const char* types);
OBJC_PUBLIC IMP class_replaceMethod(Class cls, SEL name, IMP imp, const char* types);
OBJC_PUBLIC BOOL class_conformsToProtocol(Class cls, Protocol* protocol);
OBJC_PUBLIC Ivar class_getInstanceVariable(Class cls, const char* name);
OBJC_PUBLIC ptrdiff_t ivar_getOffset(Ivar ivar);
OBJC_PUBLIC const char* ivar_getName(Ivar ivar);
OBJC_PUBLIC const char* ivar_getTypeEncoding(Ivar ivar);

OBJC_PUBLIC SEL method_getName(Method method);
OBJC_PUBLIC IMP method_getImplementation(Method method);
OBJC_PUBLIC const char* method_getTypeEncoding(Method method);
OBJC_PUBLIC IMP method_setImplementation(Method method, IMP imp);

OBJC_PUBLIC Class object_getClass(id object);
OBJC_PUBLIC Class object_setClass(id object, Class cls);
OBJC_PUBLIC const char* object_getClassName(id object);
// A zero-filled instance of cls with extraBytes after its ivars; object_dispose frees it (no -dealloc).
OBJC_PUBLIC id class_createInstance(Class cls, size_t extraBytes);
OBJC_PUBLIC id object_dispose(id object);

OBJC_PUBLIC Protocol* objc_getProtocol(const char* name);
OBJC_PUBLIC const char* protocol_getName(Protocol* protocol);
OBJC_PUBLIC BOOL protocol_conformsToProtocol(Protocol* protocol, Protocol* other);

// -- Reference counting and autorelease pools ----------------------------------------------------------------
// The same counts -retain/-release use, without a message for NSObject's own implementation.
OBJC_PUBLIC id objc_retain(id object);
OBJC_PUBLIC void objc_release(id object);
OBJC_PUBLIC id objc_autorelease(id object);
OBJC_PUBLIC id objc_retainAutoreleasedReturnValue(id object);
OBJC_PUBLIC id objc_autoreleaseReturnValue(id object);
OBJC_PUBLIC void* objc_autoreleasePoolPush(void);
OBJC_PUBLIC void objc_autoreleasePoolPop(void* pool);

// -- Associated objects --------------------------------------------------------------------------------------
typedef enum objc_AssociationPolicy {
  OBJC_ASSOCIATION_ASSIGN = 0,
  OBJC_ASSOCIATION_RETAIN_NONATOMIC = 1,
  OBJC_ASSOCIATION_COPY_NONATOMIC = 3,
  OBJC_ASSOCIATION_RETAIN = 01401,
  OBJC_ASSOCIATION_COPY = 01403,
} objc_AssociationPolicy;
OBJC_PUBLIC void objc_setAssociatedObject(id object, const void* key, id value, objc_AssociationPolicy policy);
OBJC_PUBLIC id objc_getAssociatedObject(id object, const void* key);
OBJC_PUBLIC void objc_removeAssociatedObjects(id object);

// -- Exceptions and @synchronized ----------------------------------------------------------------------------
OBJC_PUBLIC void objc_exception_throw(id exception) __attribute__((noreturn));
OBJC_PUBLIC void objc_exception_rethrow(void* exception) __attribute__((noreturn));
OBJC_PUBLIC int objc_sync_enter(id object);
OBJC_PUBLIC int objc_sync_exit(id object);
enum { OBJC_SYNC_SUCCESS = 0, OBJC_SYNC_NOT_OWNING_THREAD_ERROR = -1 };
// Called when fast enumeration sees its collection mutate: raises NSGenericException.
OBJC_PUBLIC void objc_enumerationMutation(id collection);

#ifdef __cplusplus
}
#endif
