// The runtime's view of what clang emits for the GNUstep 2.0 ABI (-fobjc-runtime=gnustep-2.0), and the state it
// keeps beside it. Layouts are those of libobjc2's ABI description ("GNUstep Objective-C ABI version 10") as
// clang 14 emits them; nothing here is shared with Objective-C code, which sees only <objc/runtime.h>.
#pragma once

#include <objc/runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

#define OBJC_INTERNAL __attribute__((visibility("hidden")))

struct objc_object {
  Class isa;
};

struct objc_selector {
  // The compiler's name; the loader replaces it with the canonical (interned) copy of the name, so that two
  // selectors are the same message exactly when their name pointers are equal, whichever shared object they
  // come from.
  const char* name;
  const char* types;
};

struct objc_method {
  IMP imp;
  SEL selector;
  const char* types;
};

struct objc_method_list {
  objc_method_list* next;  // categories' lists are chained in front of the class's own
  int count;
  size_t size;  // of one objc_method, as the compiler wrote it
  objc_method methods[];
};

struct objc_ivar {
  const char* name;
  const char* type;
  int* offset;  // the __objc_ivar_offset_ variable: the compiler's offset within this class's ivars, then the loader's
  uint32_t size;
  uint32_t flags;  // bits 3..8: log2 of the alignment
};

struct objc_ivar_list {
  int count;
  size_t size;
  objc_ivar ivars[];
};

struct objc_protocol;

struct objc_protocol_list {
  objc_protocol_list* next;
  size_t count;
  objc_protocol* list[];
};

struct objc_protocol_method_description {
  SEL selector;
  const char* types;
};

struct objc_protocol_method_description_list {
  int count;
  int size;
  objc_protocol_method_description methods[];
};

struct objc_property {
  const char* name;
  const char* attributes;
  const char* type;
  SEL getter;
  SEL setter;
};

struct objc_property_list {
  int count;
  int size;
  objc_property_list* next;
  objc_property properties[];
};

struct objc_protocol {
  id isa;  // 4 from the compiler (the ABI version); the runtime points it at the Protocol class when there is one
  const char* name;
  objc_protocol_list* protocols;
  objc_protocol_method_description_list* instance_methods;
  objc_protocol_method_description_list* class_methods;
  objc_protocol_method_description_list* optional_instance_methods;
  objc_protocol_method_description_list* optional_class_methods;
  objc_property_list* properties;
  objc_property_list* optional_properties;
  objc_property_list* class_properties;
  objc_property_list* optional_class_properties;
};

struct objc_category {
  const char* name;
  const char* class_name;
  objc_method_list* instance_methods;
  objc_method_list* class_methods;
  objc_protocol_list* protocols;
  objc_property_list* properties;
  objc_property_list* class_properties;
};

struct objc_alias {
  const char* alias_name;
  Class* alias;
};

// What @"..." literals longer than a tagged pointer holds are.
struct objc_constant_string {
  Class isa;
  uint32_t flags;   // low 2 bits: 0 ASCII, 1 UTF-8, 2 UTF-16, 3 UTF-32
  uint32_t length;  // in UTF-16 units
  uint32_t size;    // in bytes
  uint32_t hash;
  const void* data;
};

struct objc_init {
  uint64_t version;
  objc_selector* sel_begin;
  objc_selector* sel_end;
  Class* cls_begin;
  Class* cls_end;
  Class* cls_ref_begin;
  Class* cls_ref_end;
  objc_category* cat_begin;  // the section holds the category structures themselves (classes': pointers)
  objc_category* cat_end;
  objc_protocol* proto_begin;
  objc_protocol* proto_end;
  objc_protocol** proto_ref_begin;
  objc_protocol** proto_ref_end;
  objc_alias* alias_begin;
  objc_alias* alias_end;
  objc_constant_string* strings_begin;
  objc_constant_string* strings_end;
};

struct DispatchCache;
struct ClassInfo;

struct objc_class {
  Class isa;
  Class super_class;
  const char* name;
  long version;
  unsigned long info;  // bit 0: metaclass (from the compiler)
  long instance_size;  // negative from the compiler: minus the size of this class's own ivars
  objc_ivar_list* ivars;
  objc_method_list* methods;
  std::atomic<DispatchCache*> dtable;  // the runtime's method cache (starts null)
  Class subclass_list;
  IMP cxx_construct;
  IMP cxx_destruct;
  Class sibling_class;
  objc_protocol_list* protocols;
  ClassInfo* extra_data;  // the runtime's state of the class, shared by the class and its metaclass
  long abi_version;
  objc_property_list* properties;
};

static_assert(sizeof(objc_class) == 17 * sizeof(void*), "clang's v2 class structure is 17 words");
static_assert(offsetof(objc_class, properties) == 16 * sizeof(void*), "");
static_assert(sizeof(objc_method) == 24 && sizeof(objc_constant_string) == 32, "");

enum : unsigned long { CLASS_INFO_META = 1 };

struct ClassInfo {
  Class cls;
  Class meta;
  enum State : int { UNINITIALIZED, INITIALIZING, INITIALIZED };
  std::atomic<int> state{UNINITIALIZED};
  std::thread::id initializer;
  size_t alignment = alignof(max_align_t);
};

// Every instance is preceded by this header: its reference count lives here, so that instances are exactly what
// the compiler laid out (the isa first); its size keeps them 16-byte aligned.
struct ObjectHeader {
  std::atomic<intptr_t> extra_retains;  // retainCount - 1
  intptr_t reserved;
};
static_assert(sizeof(ObjectHeader) == 16, "");

// Small objects: pointers whose low 3 bits are not zero. Tag 4 is clang's tagged @"..." literal (up to 8 7-bit
// characters from bit 63 down, length in bits 3..7).
enum : uintptr_t { SMALL_OBJECT_MASK = 7 };
inline bool is_small_object(const void* object) { return (reinterpret_cast<uintptr_t>(object) & SMALL_OBJECT_MASK) != 0; }

OBJC_INTERNAL extern Class small_object_classes[8];

inline Class class_of(id object) {
  if (is_small_object(object)) return small_object_classes[reinterpret_cast<uintptr_t>(object) & SMALL_OBJECT_MASK];
  return object->isa;
}

inline ObjectHeader* header_of(id object) {
  return reinterpret_cast<ObjectHeader*>(reinterpret_cast<char*>(object) - sizeof(ObjectHeader));
}

OBJC_INTERNAL void runtime_fatal(const char* format, ...) __attribute__((noreturn, format(printf, 1, 2)));
// The canonical copy of a selector name: two selectors are one message exactly when these are equal.
OBJC_INTERNAL const char* intern_selector_name(const char* name);
