// shimkit's Objective-C runtime: loading what clang's GNUstep 2.0 code generation emits (__objc_load), selectors,
// classes and their method caches, +initialize, instances, protocols, properties, @synchronized and associated
// objects. Message sending itself is objc_msgSend.S over objc_msg_lookup here; exceptions are exceptions.cpp.
#include "internal.h"

#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

Class small_object_classes[8];

namespace {

// Everything the runtime keeps for the life of the process. It is reached through a pointer that is never
// freed: __objc_load runs from other objects' constructors, possibly before this file's own static
// constructors would have, and at exit the tables stay reachable (LeakSanitizer counts nothing in them).
struct Runtime {
  std::recursive_mutex lock;  // class table, method lists, caches; recursive: +load and +initialize send messages
  std::mutex selector_lock;
  std::unordered_map<std::string_view, const char*> selector_names;  // name -> canonical copy
  std::unordered_map<const char*, objc_selector*> selectors;        // canonical name -> runtime SEL
  std::unordered_map<std::string_view, Class> classes;
  std::unordered_map<std::string_view, objc_protocol*> protocols;
  std::vector<objc_protocol*> protocol_copies;  // every copy loaded (one per shared object), for their isa
  std::vector<Class> all_classes;
  std::vector<objc_category*> pending_categories;  // whose class is not loaded yet
  std::vector<DispatchCache*> retired_caches;      // still read by threads that loaded them before a flush
  void (*enumeration_mutation_handler)(id) = nullptr;
};

Runtime& runtime() {
  static Runtime* instance = new Runtime;
  return *instance;
}

std::mutex& init_mutex() {
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}

std::condition_variable& init_condition() {
  static std::condition_variable* condition = new std::condition_variable;
  return *condition;
}

}  // namespace

void runtime_fatal(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("objc runtime: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::abort();
}

// -- Selectors --------------------------------------------------------------------------------------------------

const char* intern_selector_name(const char* name) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> guard(rt.selector_lock);
  auto found = rt.selector_names.find(name);
  if (found != rt.selector_names.end()) return found->second;
  // A copy of our own: the compiler's string goes away with its shared object.
  char* copy = strdup(name);
  rt.selector_names.emplace(std::string_view(copy), copy);
  return copy;
}

SEL sel_registerName(const char* name) {
  if (!name) return nullptr;
  const char* canonical = intern_selector_name(name);
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> guard(rt.selector_lock);
  objc_selector*& sel = rt.selectors[canonical];
  if (!sel) sel = new objc_selector{canonical, nullptr};
  return sel;
}

SEL sel_getUid(const char* name) { return sel_registerName(name); }
const char* sel_getName(SEL sel) { return sel ? sel->name : "<null selector>"; }
BOOL sel_isEqual(SEL a, SEL b) { return a == b || (a && b && intern_selector_name(a->name) == intern_selector_name(b->name)); }

// -- Method caches ----------------------------------------------------------------------------------------------

// Open addressing keyed by the canonical selector name, filled in place: a slot's key goes from null to its
// selector once, written after its IMP, so a reader that sees the key sees the IMP. A full table is replaced
// by one twice its size; the old one is retired, never freed, since a reader may still hold it.
struct DispatchCache {
  size_t mask;
  size_t used;
  struct Slot {
    std::atomic<const char*> key;
    std::atomic<IMP> imp;
  } slots[];
};

namespace {

size_t cache_index(const char* key, size_t mask) {
  return ((reinterpret_cast<uintptr_t>(key) >> 3) * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

DispatchCache* new_cache(size_t capacity) {
  void* memory = calloc(1, sizeof(DispatchCache) + capacity * sizeof(DispatchCache::Slot));
  auto* cache = static_cast<DispatchCache*>(memory);
  cache->mask = capacity - 1;
  return cache;
}

IMP cache_probe(DispatchCache* cache, const char* key) {
  for (size_t i = cache_index(key, cache->mask);; i = (i + 1) & cache->mask) {
    const char* found = cache->slots[i].key.load(std::memory_order_acquire);
    if (found == key) return cache->slots[i].imp.load(std::memory_order_relaxed);
    if (!found) return nullptr;
  }
}

void cache_store(DispatchCache* cache, const char* key, IMP imp) {
  for (size_t i = cache_index(key, cache->mask);; i = (i + 1) & cache->mask) {
    const char* found = cache->slots[i].key.load(std::memory_order_relaxed);
    if (found == key) return;
    if (!found) {
      cache->slots[i].imp.store(imp, std::memory_order_relaxed);
      cache->slots[i].key.store(key, std::memory_order_release);
      cache->used++;
      return;
    }
  }
}

// Caller holds runtime().lock.
void cache_insert(Class cls, const char* key, IMP imp) {
  DispatchCache* cache = cls->dtable.load(std::memory_order_relaxed);
  if (!cache || (cache->used + 1) * 2 > cache->mask + 1) {
    DispatchCache* grown = new_cache(cache ? (cache->mask + 1) * 2 : 16);
    if (cache) {
      for (size_t i = 0; i <= cache->mask; i++) {
        if (const char* old = cache->slots[i].key.load(std::memory_order_relaxed))
          cache_store(grown, old, cache->slots[i].imp.load(std::memory_order_relaxed));
      }
      runtime().retired_caches.push_back(cache);
    }
    cache_store(grown, key, imp);
    cls->dtable.store(grown, std::memory_order_release);
    return;
  }
  cache_store(cache, key, imp);
}

// After any change to method lists. Caller holds runtime().lock.
void flush_caches() {
  Runtime& rt = runtime();
  for (Class cls : rt.all_classes) {
    for (Class c : {cls, cls->isa}) {
      if (DispatchCache* cache = c->dtable.exchange(nullptr, std::memory_order_acq_rel)) rt.retired_caches.push_back(cache);
    }
  }
}

objc_method* method_at(objc_method_list* list, int index) {
  return reinterpret_cast<objc_method*>(reinterpret_cast<char*>(list->methods) + index * list->size);
}

objc_method* find_own_method(Class cls, const char* uid) {
  for (objc_method_list* list = cls->methods; list; list = list->next) {
    for (int i = 0; i < list->count; i++) {
      objc_method* method = method_at(list, i);
      if (method->selector && method->selector->name == uid) return method;
    }
  }
  return nullptr;
}

objc_method* find_method(Class cls, const char* uid) {
  for (Class c = cls; c; c = c->super_class) {
    if (objc_method* method = find_own_method(c, uid)) return method;
  }
  return nullptr;
}

void intern_method_list(objc_method_list* list) {
  for (; list; list = list->next) {
    for (int i = 0; i < list->count; i++) {
      objc_method* method = method_at(list, i);
      if (method->selector && method->selector->name) method->selector->name = intern_selector_name(method->selector->name);
    }
  }
}

id nil_method(id, SEL, ...) { return nullptr; }

// What a message no class implements gets: -doesNotRecognizeSelector: (Foundation's raises
// NSInvalidArgumentException), else a fatal error naming the message.
id unrecognized_selector(id self, SEL cmd, ...) {
  Class cls = class_of(self);
  static const char* uid = intern_selector_name("doesNotRecognizeSelector:");
  objc_method* handler;
  {
    std::lock_guard<std::recursive_mutex> guard(runtime().lock);
    handler = find_method(cls, uid);
  }
  if (handler) reinterpret_cast<void (*)(id, SEL, SEL)>(handler->imp)(self, sel_registerName(uid), cmd);
  runtime_fatal("%c[%s %s]: unrecognized selector sent to %s %p", (cls->info & CLASS_INFO_META) ? '+' : '-',
                cls->name, sel_getName(cmd), (cls->info & CLASS_INFO_META) ? "class" : "instance", (void*)self);
}

void ensure_initialized(ClassInfo* info) {
  if (info->state.load(std::memory_order_acquire) == ClassInfo::INITIALIZED) return;
  if (Class super = info->cls->super_class) ensure_initialized(super->extra_data);
  {
    std::unique_lock<std::mutex> lock(init_mutex());
    for (;;) {
      int state = info->state.load();
      if (state == ClassInfo::INITIALIZED) return;
      if (state == ClassInfo::INITIALIZING) {
        // The initializing thread's own messages go through (uncached); other threads wait for it.
        if (info->initializer == std::this_thread::get_id()) return;
        init_condition().wait(lock);
        continue;
      }
      break;
    }
    info->state = ClassInfo::INITIALIZING;
    info->initializer = std::this_thread::get_id();
  }
  struct Finish {
    ClassInfo* info;
    ~Finish() {
      std::lock_guard<std::mutex> lock(init_mutex());
      info->state.store(ClassInfo::INITIALIZED, std::memory_order_release);
      init_condition().notify_all();
    }
  } finish{info};
  static const char* uid = intern_selector_name("initialize");
  objc_method* method;
  {
    std::lock_guard<std::recursive_mutex> guard(runtime().lock);
    method = find_method(info->meta, uid);
  }
  if (method) reinterpret_cast<void (*)(id, SEL)>(method->imp)(reinterpret_cast<id>(info->cls), sel_registerName(uid));
}

void resolve_class(Class cls, std::vector<Class>& loaded);

// A class of an object whose sections are not loaded yet: a C++ static initializer of the program that runs
// before the program's own __objc_load. Its structures are complete; they are resolved now (its +load, if any,
// is not sent).
ClassInfo* resolve_early(Class cls, SEL sel, id receiver) {
  std::lock_guard<std::recursive_mutex> guard(runtime().lock);
  if (!cls->extra_data) {
    Class target = cls;
    if (cls->info & CLASS_INFO_META) {
      target = reinterpret_cast<Class>(receiver);  // a class message: the receiver is the class
      if (!target || target->isa != cls)
        runtime_fatal("message %s sent to a class (%p) that was never loaded", sel_getName(sel), (void*)cls);
    }
    std::vector<Class> loaded;
    resolve_class(target, loaded);
  }
  return cls->extra_data;
}

IMP slow_lookup(Class cls, SEL sel, id receiver) {
  ClassInfo* info = cls->extra_data;
  if (!info) info = resolve_early(cls, sel, receiver);
  ensure_initialized(info);
  const char* uid = intern_selector_name(sel->name);
  std::lock_guard<std::recursive_mutex> guard(runtime().lock);
  objc_method* method = find_method(cls, uid);
  IMP imp = method ? method->imp : reinterpret_cast<IMP>(unrecognized_selector);
  // Only a class whose +initialize has finished is cached: the fast path must never skip it. A foreign selector
  // (name not canonical) is answered but not cached, since the fast path compares name pointers.
  if (info->state.load(std::memory_order_acquire) == ClassInfo::INITIALIZED && uid == sel->name) cache_insert(cls, uid, imp);
  return imp;
}

}  // namespace

extern "C" {

// Called by objc_msgSend with every argument register saved.
OBJC_PUBLIC IMP objc_msg_lookup(id receiver, SEL sel) {
  if (!receiver) return reinterpret_cast<IMP>(nil_method);
  Class cls = class_of(receiver);
  if (__builtin_expect(cls == nullptr, 0)) runtime_fatal("message %s sent to a tagged pointer %p of no class", sel_getName(sel), (void*)receiver);
  if (DispatchCache* cache = cls->dtable.load(std::memory_order_acquire)) {
    if (IMP imp = cache_probe(cache, sel->name)) return imp;
  }
  return slow_lookup(cls, sel, receiver);
}

// [super message]: `super->super_class` is where the search starts (the superclass of the method's class, or
// its metaclass for a class method).
OBJC_PUBLIC IMP objc_msg_lookup_super(objc_super* super, SEL sel) {
  if (!super->receiver) return reinterpret_cast<IMP>(nil_method);
  Class cls = super->super_class;
  if (!cls) return reinterpret_cast<IMP>(unrecognized_selector);
  if (DispatchCache* cache = cls->dtable.load(std::memory_order_acquire)) {
    if (IMP imp = cache_probe(cache, sel->name)) return imp;
  }
  return slow_lookup(cls, sel, nullptr);
}

OBJC_PUBLIC void objc_setEnumerationMutationHandler(void (*handler)(id)) { runtime().enumeration_mutation_handler = handler; }

OBJC_PUBLIC void objc_enumerationMutation(id collection) {
  if (auto handler = runtime().enumeration_mutation_handler) handler(collection);
  runtime_fatal("collection %p was mutated while being enumerated", (void*)collection);
}

OBJC_PUBLIC BOOL objc_registerSmallObjectClass_np(Class cls, uintptr_t tag) {
  if (tag == 0 || tag > SMALL_OBJECT_MASK || small_object_classes[tag]) return NO;
  small_object_classes[tag] = cls;
  return YES;
}

}  // extern "C"

// -- Loading ----------------------------------------------------------------------------------------------------

namespace {

void set_protocol_isa(objc_protocol* protocol) {
  auto found = runtime().classes.find("Protocol");
  if (found != runtime().classes.end()) protocol->isa = reinterpret_cast<id>(found->second);
}

void register_protocol(objc_protocol* protocol) {
  Runtime& rt = runtime();
  set_protocol_isa(protocol);
  rt.protocol_copies.push_back(protocol);
  rt.protocols.emplace(protocol->name, protocol);
}

// The compiler's ivar offsets assume the superclass it saw; the layout is recomputed here, in declaration order
// from the end of the superclass as loaded, each ivar at the next multiple of its alignment (flag bits 3..8).
// Objects start 16-byte aligned, so that is the most an ivar gets.
void layout_instance_variables(Class cls, Class super) {
  long offset = super ? super->instance_size : 0;
  size_t alignment = super ? super->extra_data->alignment : 1;
  if (cls->ivars) {
    int last_compiler_offset = 0;
    long last_offset = 0;
    for (int i = 0; i < cls->ivars->count; i++) {
      objc_ivar* ivar = reinterpret_cast<objc_ivar*>(reinterpret_cast<char*>(cls->ivars->ivars) + i * cls->ivars->size);
      if (!ivar->offset) continue;
      // Bitfields share their storage unit's offset.
      if (i > 0 && *ivar->offset == last_compiler_offset) {
        *ivar->offset = int(last_offset);
        continue;
      }
      last_compiler_offset = *ivar->offset;
      size_t ivar_alignment = size_t(1) << ((ivar->flags >> 3) & 0x3f);
      if (ivar_alignment > 16) {
        std::fprintf(stderr, "objc runtime: ivar %s of %s wants %zu-byte alignment; objects are only 16-byte aligned\n",
                     ivar->name, cls->name, ivar_alignment);
      }
      offset = (offset + long(ivar_alignment) - 1) & ~(long(ivar_alignment) - 1);
      *ivar->offset = int(offset);
      last_offset = offset;
      offset += ivar->size;
      if (ivar_alignment > alignment) alignment = ivar_alignment;
    }
  }
  cls->instance_size = offset;
  cls->extra_data->alignment = alignment;
}

IMP own_method_named(Class cls, const char* name) {
  objc_method* method = find_own_method(cls, intern_selector_name(name));
  return method ? method->imp : nullptr;
}

void resolve_class(Class cls, std::vector<Class>& loaded) {
  if (cls->extra_data) return;
  Runtime& rt = runtime();
  Class super = cls->super_class;
  // The superclass is a direct reference (its symbol): whichever object defines it, it can be resolved now.
  if (super && !super->extra_data) resolve_class(super, loaded);
  Class meta = cls->isa;
  Class root = cls;
  while (root->super_class) root = root->super_class;
  meta->isa = root->isa;
  meta->super_class = super ? super->isa : cls;
  auto* info = new ClassInfo;
  info->cls = cls;
  info->meta = meta;
  cls->extra_data = info;
  meta->extra_data = info;
  layout_instance_variables(cls, super);
  meta->instance_size = sizeof(objc_class);
  intern_method_list(cls->methods);
  intern_method_list(meta->methods);
  cls->cxx_construct = own_method_named(cls, ".cxx_construct");
  cls->cxx_destruct = own_method_named(cls, ".cxx_destruct");
  auto inserted = rt.classes.emplace(cls->name, cls);
  if (!inserted.second && inserted.first->second != cls)
    std::fprintf(stderr, "objc runtime: class %s is defined twice (%p and %p); the first is used\n", cls->name,
                 (void*)inserted.first->second, (void*)cls);
  rt.all_classes.push_back(cls);
  if (std::strcmp(cls->name, "Protocol") == 0) {
    for (objc_protocol* protocol : rt.protocol_copies) protocol->isa = reinterpret_cast<id>(cls);
  }
  loaded.push_back(cls);
}

bool attach_category(objc_category* category) {
  Runtime& rt = runtime();
  auto found = rt.classes.find(category->class_name);
  if (found == rt.classes.end()) return false;
  Class cls = found->second;
  // In front of the class's lists: a category's method replaces the class's own, as on Apple.
  if (category->instance_methods) {
    intern_method_list(category->instance_methods);
    category->instance_methods->next = cls->methods;
    cls->methods = category->instance_methods;
  }
  if (category->class_methods) {
    intern_method_list(category->class_methods);
    category->class_methods->next = cls->isa->methods;
    cls->isa->methods = category->class_methods;
  }
  if (category->protocols && category->protocols->count) {
    category->protocols->next = cls->protocols;
    cls->protocols = category->protocols;
  }
  flush_caches();
  return true;
}

}  // namespace

extern "C" OBJC_PUBLIC void __objc_load(objc_init* init) {
  std::vector<std::pair<IMP, Class>> load_methods;
  {
    Runtime& rt = runtime();
    std::lock_guard<std::recursive_mutex> guard(rt.lock);
    if (init->version == UINT64_MAX) return;  // this object's sections, already loaded
    if (init->version != 0) runtime_fatal("unknown Objective-C ABI version %llu", (unsigned long long)init->version);
    for (objc_selector* sel = init->sel_begin; sel < init->sel_end; sel++) {
      if (sel->name) sel->name = intern_selector_name(sel->name);
    }
    for (objc_protocol* protocol = init->proto_begin; protocol < init->proto_end; protocol++) {
      if (protocol->name) register_protocol(protocol);
    }
    // @protocol(P) answers the first copy of P loaded, whichever object asks.
    for (objc_protocol** ref = init->proto_ref_begin; ref < init->proto_ref_end; ref++) {
      if (!*ref || !(*ref)->name) continue;
      auto found = rt.protocols.find((*ref)->name);
      if (found == rt.protocols.end()) register_protocol(*ref);
      else *ref = found->second;
    }
    std::vector<Class> loaded;
    for (Class* cls = init->cls_begin; cls < init->cls_end; cls++) {
      if (*cls) resolve_class(*cls, loaded);
    }
    std::vector<objc_category*> categories;
    for (objc_category* category = init->cat_begin; category < init->cat_end; category++) {
      if (!category->class_name) continue;
      if (attach_category(category)) categories.push_back(category);
      else rt.pending_categories.push_back(category);
    }
    if (!loaded.empty()) {
      std::vector<objc_category*> pending;
      pending.swap(rt.pending_categories);
      for (objc_category* category : pending) {
        if (attach_category(category)) categories.push_back(category);
        else rt.pending_categories.push_back(category);
      }
    }
    for (objc_alias* alias = init->alias_begin; alias < init->alias_end; alias++) {
      if (alias->alias_name && alias->alias && *alias->alias) rt.classes.emplace(alias->alias_name, *alias->alias);
    }
    // +load: each class's own, superclasses first (resolve_class appended them first), then categories'.
    for (Class cls : loaded) {
      if (IMP imp = own_method_named(cls->isa, "load")) load_methods.emplace_back(imp, cls);
    }
    for (objc_category* category : categories) {
      if (!category->class_methods) continue;
      const char* uid = intern_selector_name("load");
      for (int i = 0; i < category->class_methods->count; i++) {
        objc_method* method = method_at(category->class_methods, i);
        if (method->selector->name == uid) load_methods.emplace_back(method->imp, rt.classes.at(category->class_name));
      }
    }
    init->version = UINT64_MAX;
  }
  // Outside the lock: +load may start threads that send messages.
  SEL load = sel_registerName("load");
  for (auto& entry : load_methods) reinterpret_cast<void (*)(id, SEL)>(entry.first)(reinterpret_cast<id>(entry.second), load);
}

// -- Classes ----------------------------------------------------------------------------------------------------

extern "C" {

Class objc_getClass(const char* name) {
  if (!name) return nullptr;
  Runtime& rt = runtime();
  std::lock_guard<std::recursive_mutex> guard(rt.lock);
  auto found = rt.classes.find(name);
  return found == rt.classes.end() ? nullptr : found->second;
}

Class objc_lookUpClass(const char* name) { return objc_getClass(name); }

Class objc_getMetaClass(const char* name) {
  Class cls = objc_getClass(name);
  return cls ? cls->isa : nullptr;
}

const char* class_getName(Class cls) { return cls ? cls->name : "nil"; }
Class class_getSuperclass(Class cls) { return cls ? cls->super_class : nullptr; }
BOOL class_isMetaClass(Class cls) { return cls && (cls->info & CLASS_INFO_META) ? YES : NO; }
size_t class_getInstanceSize(Class cls) { return cls ? size_t(cls->instance_size) : 0; }

Method class_getInstanceMethod(Class cls, SEL sel) {
  if (!cls || !sel) return nullptr;
  std::lock_guard<std::recursive_mutex> guard(runtime().lock);
  return find_method(cls, intern_selector_name(sel->name));
}

Method class_getClassMethod(Class cls, SEL sel) { return cls ? class_getInstanceMethod(cls->isa, sel) : nullptr; }

BOOL class_respondsToSelector(Class cls, SEL sel) { return class_getInstanceMethod(cls, sel) ? YES : NO; }

IMP class_getMethodImplementation(Class cls, SEL sel) {
  Method method = class_getInstanceMethod(cls, sel);
  return method ? method->imp : reinterpret_cast<IMP>(unrecognized_selector);
}

BOOL class_addMethod(Class cls, SEL name, IMP imp, const char* types) {
  if (!cls || !name || !imp) return NO;
  std::lock_guard<std::recursive_mutex> guard(runtime().lock);
  const char* uid = intern_selector_name(name->name);
  if (find_own_method(cls, uid)) return NO;
  auto* list = static_cast<objc_method_list*>(calloc(1, sizeof(objc_method_list) + sizeof(objc_method)));
  list->count = 1;
  list->size = sizeof(objc_method);
  list->methods[0] = objc_method{imp, sel_registerName(uid), types};
  list->next = cls->methods;
  cls->methods = list;
  flush_caches();
  return YES;
}

IMP class_replaceMethod(Class cls, SEL name, IMP imp, const char* types) {
  if (!cls || !name || !imp) return nullptr;
  std::lock_guard<std::recursive_mutex> guard(runtime().lock);
  if (objc_method* method = find_own_method(cls, intern_selector_name(name->name))) {
    IMP old = method->imp;
    method->imp = imp;
    flush_caches();
    return old;
  }
  class_addMethod(cls, name, imp, types);
  return nullptr;
}

Ivar class_getInstanceVariable(Class cls, const char* name) {
  for (Class c = cls; c && name; c = c->super_class) {
    if (!c->ivars) continue;
    for (int i = 0; i < c->ivars->count; i++) {
      objc_ivar* ivar = reinterpret_cast<objc_ivar*>(reinterpret_cast<char*>(c->ivars->ivars) + i * c->ivars->size);
      if (ivar->name && std::strcmp(ivar->name, name) == 0) return ivar;
    }
  }
  return nullptr;
}

ptrdiff_t ivar_getOffset(Ivar ivar) { return ivar && ivar->offset ? *ivar->offset : 0; }
const char* ivar_getName(Ivar ivar) { return ivar ? ivar->name : nullptr; }
const char* ivar_getTypeEncoding(Ivar ivar) { return ivar ? ivar->type : nullptr; }

SEL method_getName(Method method) { return method ? method->selector : nullptr; }
IMP method_getImplementation(Method method) { return method ? method->imp : nullptr; }
const char* method_getTypeEncoding(Method method) { return method ? method->types : nullptr; }

IMP method_setImplementation(Method method, IMP imp) {
  if (!method || !imp) return nullptr;
  std::lock_guard<std::recursive_mutex> guard(runtime().lock);
  IMP old = method->imp;
  method->imp = imp;
  flush_caches();
  return old;
}

Class object_getClass(id object) { return object ? class_of(object) : nullptr; }

Class object_setClass(id object, Class cls) {
  if (!object || is_small_object(object)) return nullptr;
  Class old = object->isa;
  object->isa = cls;
  return old;
}

const char* object_getClassName(id object) { return class_getName(object_getClass(object)); }

// -- Protocols --------------------------------------------------------------------------------------------------

}  // extern "C"

namespace {

// Protocols are compared by name: each shared object carries its own copy of every protocol it uses.
bool protocol_named(objc_protocol* protocol, const char* name) {
  if (!protocol || !protocol->name) return false;
  if (std::strcmp(protocol->name, name) == 0) return true;
  for (objc_protocol_list* list = protocol->protocols; list; list = list->next) {
    for (size_t i = 0; i < list->count; i++) {
      if (protocol_named(list->list[i], name)) return true;
    }
  }
  return false;
}

bool list_conforms(objc_protocol_list* list, const char* name) {
  for (; list; list = list->next) {
    for (size_t i = 0; i < list->count; i++) {
      if (protocol_named(list->list[i], name)) return true;
    }
  }
  return false;
}

}  // namespace

extern "C" {

// As on Apple, the class's own declarations (with its categories'), not its superclasses': NSObject's
// -conformsToProtocol: walks those.
BOOL class_conformsToProtocol(Class cls, Protocol* protocol) {
  if (!cls || !protocol) return NO;
  std::lock_guard<std::recursive_mutex> guard(runtime().lock);
  return list_conforms(cls->protocols, reinterpret_cast<objc_protocol*>(protocol)->name) ? YES : NO;
}

Protocol* objc_getProtocol(const char* name) {
  if (!name) return nullptr;
  std::lock_guard<std::recursive_mutex> guard(runtime().lock);
  auto found = runtime().protocols.find(name);
  return found == runtime().protocols.end() ? nullptr : reinterpret_cast<Protocol*>(found->second);
}

const char* protocol_getName(Protocol* protocol) { return protocol ? reinterpret_cast<objc_protocol*>(protocol)->name : nullptr; }

BOOL protocol_conformsToProtocol(Protocol* protocol, Protocol* other) {
  if (!protocol || !other) return NO;
  return protocol_named(reinterpret_cast<objc_protocol*>(protocol), reinterpret_cast<objc_protocol*>(other)->name) ? YES : NO;
}

// -- Instances --------------------------------------------------------------------------------------------------

id class_createInstance(Class cls, size_t extra_bytes) {
  if (!cls) return nullptr;
  void* memory = calloc(1, sizeof(ObjectHeader) + size_t(cls->instance_size) + extra_bytes);
  if (!memory) return nullptr;
  id object = reinterpret_cast<id>(static_cast<char*>(memory) + sizeof(ObjectHeader));
  object->isa = cls;
  // C++ ivars: each class's .cxx_construct, root first.
  Class chain[64];
  int depth = 0;
  for (Class c = cls; c && depth < 64; c = c->super_class) chain[depth++] = c;
  static SEL construct = sel_registerName(".cxx_construct");
  while (depth-- > 0) {
    if (chain[depth]->cxx_construct) reinterpret_cast<id (*)(id, SEL)>(chain[depth]->cxx_construct)(object, construct);
  }
  return object;
}

void objc_removeAssociatedObjects(id object);

id object_dispose(id object) {
  if (!object || is_small_object(object)) return nullptr;
  static SEL destruct = sel_registerName(".cxx_destruct");
  for (Class c = object->isa; c; c = c->super_class) {
    if (c->cxx_destruct) reinterpret_cast<void (*)(id, SEL)>(c->cxx_destruct)(object, destruct);
  }
  objc_removeAssociatedObjects(object);
  free(header_of(object));
  return nullptr;
}

// Reference counts for NSObject (its -retain, -release, -retainCount are these).
OBJC_PUBLIC void objc_shimkit_retain(id object) { header_of(object)->extra_retains.fetch_add(1, std::memory_order_relaxed); }

// True when this was the last reference: the caller sends -dealloc.
OBJC_PUBLIC BOOL objc_shimkit_release(id object) {
  return header_of(object)->extra_retains.fetch_sub(1, std::memory_order_acq_rel) == 0 ? YES : NO;
}

OBJC_PUBLIC size_t objc_shimkit_retain_count(id object) {
  return size_t(header_of(object)->extra_retains.load(std::memory_order_relaxed) + 1);
}

}  // extern "C"

// -- Properties -------------------------------------------------------------------------------------------------

namespace {

// Atomic properties take one of these, picked by the ivar's address.
std::mutex& property_lock(const void* address) {
  static std::mutex* locks = new std::mutex[64];
  return locks[(reinterpret_cast<uintptr_t>(address) >> 4) & 63];
}

SEL selector_copy() {
  static SEL sel = sel_registerName("copy");
  return sel;
}

SEL selector_mutable_copy() {
  static SEL sel = sel_registerName("mutableCopy");
  return sel;
}

id send(id receiver, SEL sel) { return receiver ? reinterpret_cast<id (*)(id, SEL)>(objc_msg_lookup(receiver, sel))(receiver, sel) : nullptr; }

void set_property(id self, ptrdiff_t offset, id value, bool atomic, int copy) {
  id* slot = reinterpret_cast<id*>(reinterpret_cast<char*>(self) + offset);
  if (copy == 1) value = send(value, selector_copy());
  else if (copy == 2) value = send(value, selector_mutable_copy());
  else value = objc_retain(value);
  id old;
  if (atomic) {
    std::lock_guard<std::mutex> guard(property_lock(slot));
    old = *slot;
    *slot = value;
  } else {
    old = *slot;
    *slot = value;
  }
  objc_release(old);
}

}  // namespace

extern "C" {

OBJC_PUBLIC id objc_getProperty(id self, SEL, ptrdiff_t offset, BOOL atomic) {
  if (!self) return nullptr;
  id* slot = reinterpret_cast<id*>(reinterpret_cast<char*>(self) + offset);
  if (!atomic) return *slot;
  id value;
  {
    std::lock_guard<std::mutex> guard(property_lock(slot));
    value = objc_retain(*slot);
  }
  return objc_autorelease(value);
}

OBJC_PUBLIC void objc_setProperty(id self, SEL, ptrdiff_t offset, id value, BOOL atomic, signed char copy) {
  if (self) set_property(self, offset, value, atomic, copy);
}
OBJC_PUBLIC void objc_setProperty_atomic(id self, SEL, id value, ptrdiff_t offset) { set_property(self, offset, value, true, 0); }
OBJC_PUBLIC void objc_setProperty_nonatomic(id self, SEL, id value, ptrdiff_t offset) { set_property(self, offset, value, false, 0); }
OBJC_PUBLIC void objc_setProperty_atomic_copy(id self, SEL, id value, ptrdiff_t offset) { set_property(self, offset, value, true, 1); }
OBJC_PUBLIC void objc_setProperty_nonatomic_copy(id self, SEL, id value, ptrdiff_t offset) { set_property(self, offset, value, false, 1); }

// Atomic struct-typed properties.
OBJC_PUBLIC void objc_copyStruct(void* dest, const void* src, ptrdiff_t size, BOOL atomic, BOOL) {
  if (!atomic) {
    std::memcpy(dest, src, size_t(size));
    return;
  }
  std::mutex& first = property_lock(src);
  std::mutex& second = property_lock(dest);
  std::lock_guard<std::mutex> a(first);
  if (&second != &first) {
    std::lock_guard<std::mutex> b(second);
    std::memcpy(dest, src, size_t(size));
  } else {
    std::memcpy(dest, src, size_t(size));
  }
}
OBJC_PUBLIC void objc_getPropertyStruct(void* dest, const void* src, ptrdiff_t size, BOOL atomic, BOOL strong) {
  objc_copyStruct(dest, src, size, atomic, strong);
}
OBJC_PUBLIC void objc_setPropertyStruct(void* dest, const void* src, ptrdiff_t size, BOOL atomic, BOOL strong) {
  objc_copyStruct(dest, src, size, atomic, strong);
}

}  // extern "C"

// -- @synchronized ----------------------------------------------------------------------------------------------

namespace {

struct SyncEntry {
  std::recursive_mutex mutex;
  int users = 0;  // holders and waiters: the entry goes when the last one leaves
};

struct SyncTable {
  std::mutex lock;
  std::unordered_map<id, SyncEntry*> entries;
};

SyncTable& sync_table() {
  static SyncTable* table = new SyncTable;
  return *table;
}

}  // namespace

extern "C" {

int objc_sync_enter(id object) {
  if (!object) return OBJC_SYNC_SUCCESS;  // @synchronized(nil) does nothing, as on Apple
  SyncTable& table = sync_table();
  SyncEntry* entry;
  {
    std::lock_guard<std::mutex> guard(table.lock);
    SyncEntry*& slot = table.entries[object];
    if (!slot) slot = new SyncEntry;
    entry = slot;
    entry->users++;
  }
  entry->mutex.lock();
  return OBJC_SYNC_SUCCESS;
}

int objc_sync_exit(id object) {
  if (!object) return OBJC_SYNC_SUCCESS;
  SyncTable& table = sync_table();
  std::lock_guard<std::mutex> guard(table.lock);
  auto found = table.entries.find(object);
  if (found == table.entries.end()) return OBJC_SYNC_NOT_OWNING_THREAD_ERROR;
  SyncEntry* entry = found->second;
  entry->mutex.unlock();
  if (--entry->users == 0) {
    table.entries.erase(found);
    delete entry;
  }
  return OBJC_SYNC_SUCCESS;
}

}  // extern "C"

// -- Associated objects -----------------------------------------------------------------------------------------

namespace {

struct Association {
  const void* key;
  id value;
  objc_AssociationPolicy policy;
};

// A side table, not the object's header: classes and literals, which have none, take associations too.
struct AssociationTable {
  std::mutex lock;
  std::unordered_map<id, std::vector<Association>> objects;
  std::atomic<bool> used{false};  // object_dispose skips the table until anything was ever associated
};

AssociationTable& associations() {
  static AssociationTable* table = new AssociationTable;
  return *table;
}

bool retains(objc_AssociationPolicy policy) { return policy != OBJC_ASSOCIATION_ASSIGN; }

}  // namespace

extern "C" {

void objc_setAssociatedObject(id object, const void* key, id value, objc_AssociationPolicy policy) {
  if (!object) return;
  if (value && retains(policy)) value = (policy & 3) == 3 ? send(value, selector_copy()) : objc_retain(value);
  Association old{nullptr, nullptr, OBJC_ASSOCIATION_ASSIGN};
  AssociationTable& table = associations();
  {
    std::lock_guard<std::mutex> guard(table.lock);
    table.used.store(true, std::memory_order_relaxed);
    std::vector<Association>& entries = table.objects[object];
    bool replaced = false;
    for (Association& entry : entries) {
      if (entry.key == key) {
        old = entry;
        entry.value = value;
        entry.policy = policy;
        replaced = true;
        break;
      }
    }
    if (!replaced) entries.push_back(Association{key, value, policy});
  }
  if (old.value && retains(old.policy)) objc_release(old.value);
}

id objc_getAssociatedObject(id object, const void* key) {
  if (!object) return nullptr;
  AssociationTable& table = associations();
  std::lock_guard<std::mutex> guard(table.lock);
  auto found = table.objects.find(object);
  if (found == table.objects.end()) return nullptr;
  for (Association& entry : found->second) {
    if (entry.key == key) return entry.value;
  }
  return nullptr;
}

void objc_removeAssociatedObjects(id object) {
  AssociationTable& table = associations();
  if (!object || !table.used.load(std::memory_order_relaxed)) return;
  std::vector<Association> removed;
  {
    std::lock_guard<std::mutex> guard(table.lock);
    auto found = table.objects.find(object);
    if (found == table.objects.end()) return;
    removed.swap(found->second);
    table.objects.erase(found);
  }
  for (Association& entry : removed) {
    if (entry.value && retains(entry.policy)) objc_release(entry.value);
  }
}

}  // extern "C"

// -- Classes the runtime makes itself -----------------------------------------------------------------------------

// Turns `storage` (libBlocksRuntime's room in an _NSConcrete*Block symbol, 32 words) into a subclass of
// `superclass` with no ivars of its own and no +initialize, sharing its superclass's metaclass.
extern "C" OBJC_PUBLIC void objc_shimkit_install_block_class(void* storage, Class superclass, const char* name) {
  static_assert(sizeof(objc_class) <= 32 * sizeof(void*), "a class must fit libBlocksRuntime's reserved words");
  Runtime& rt = runtime();
  std::lock_guard<std::recursive_mutex> guard(rt.lock);
  Class cls = new (storage) objc_class();
  cls->isa = superclass->isa;
  cls->super_class = superclass;
  cls->name = name;
  cls->instance_size = superclass->instance_size;
  auto* info = new ClassInfo;
  info->cls = cls;
  info->meta = superclass->isa;
  info->state.store(ClassInfo::INITIALIZED);
  cls->extra_data = info;
  rt.classes.emplace(name, cls);
  rt.all_classes.push_back(cls);
}
