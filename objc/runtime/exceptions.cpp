// Objective-C exceptions as C++ exceptions.
//
// `@throw obj` (objc_exception_throw) throws the object pointer as a C++ exception of type `@id` (the
// __objc_id_type_info below), so one unwinder and one personality, libstdc++'s, serve both languages:
// `@catch (id e)` names __objc_id_type_info, `@catch (NSException* e)` names a type_info clang emits itself
// (__objc_eh_typeinfo_NSException, of class gnustep::libobjc::__objc_class_type_info, named by the class name),
// whose __do_catch below matches a thrown object of that class or a subclass. C++ exceptions match neither, so
// they pass through @catch clauses to C++ handlers; C++ `catch (...)` catches Objective-C exceptions.
//
// The one repair: clang ends an Objective-C++ @finally that an exception reached by calling
// _Unwind_Resume_or_Rethrow on an exception it has already __cxa_begin_catch'ed, without __cxa_rethrow's
// bookkeeping; the cleanup on the way out then calls __cxa_end_catch, which would free the exception still in
// flight. The personality below, on the first frame of that new search, does what __cxa_rethrow would have done.
#include "internal.h"

#include <cxxabi.h>
#include <unwind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <typeinfo>

namespace gnustep {
namespace libobjc {

struct __attribute__((visibility("default"))) __objc_type_info : std::type_info {
  explicit __objc_type_info(const char* name) : std::type_info(name) {}
  ~__objc_type_info() override;
  // The thrown object is the pointer: libstdc++ then hands __do_catch (and the handler) the object itself.
  bool __is_pointer_p() const override { return true; }
  bool __is_function_p() const override { return false; }
  bool __do_upcast(const __cxxabiv1::__class_type_info*, void**) const override { return false; }
};

// `@id`: the type every Objective-C exception is thrown as, and the catch type of `@catch (id e)`.
struct __attribute__((visibility("default"))) __objc_id_type_info : __objc_type_info {
  __objc_id_type_info() : __objc_type_info("@id") {}
  ~__objc_id_type_info() override;
  bool __do_catch(const std::type_info* thrown_type, void** object, unsigned outer) const override;
};

// The catch type of `@catch (SomeClass* e)`; clang emits the objects, this file their vtable.
struct __attribute__((visibility("default"))) __objc_class_type_info : __objc_type_info {
  ~__objc_class_type_info() override;
  bool __do_catch(const std::type_info* thrown_type, void** object, unsigned outer) const override;
};

}  // namespace libobjc
}  // namespace gnustep

namespace objc_eh = gnustep::libobjc;

extern "C" OBJC_PUBLIC objc_eh::__objc_id_type_info __objc_id_type_info;
objc_eh::__objc_id_type_info __objc_id_type_info;

objc_eh::__objc_type_info::~__objc_type_info() {}
objc_eh::__objc_id_type_info::~__objc_id_type_info() {}
objc_eh::__objc_class_type_info::~__objc_class_type_info() {}

namespace {

bool is_objc_exception(const std::type_info* thrown_type) { return thrown_type == &__objc_id_type_info; }

bool is_kind_of(Class cls, Class target) {
  for (; cls; cls = cls->super_class) {
    if (cls == target) return true;
  }
  return false;
}

}  // namespace

bool objc_eh::__objc_id_type_info::__do_catch(const std::type_info* thrown_type, void**, unsigned) const {
  return is_objc_exception(thrown_type);
}

bool objc_eh::__objc_class_type_info::__do_catch(const std::type_info* thrown_type, void** object, unsigned) const {
  if (!is_objc_exception(thrown_type)) return false;
  id thrown = static_cast<id>(*object);
  if (!thrown) return false;  // @throw nil reaches only @catch (id)
  Class target = objc_getClass(name());
  return target && is_kind_of(class_of(thrown), target);
}

// -- Throwing ---------------------------------------------------------------------------------------------------

namespace {

void release_thrown_object(void* slot) { objc_release(*static_cast<id*>(slot)); }

// libstdc++'s exception header (the Itanium C++ ABI's __cxa_exception on x86-64): what the @finally repair reads.
constexpr ptrdiff_t HANDLER_COUNT_OFFSET = 40;
constexpr ptrdiff_t UNWIND_HEADER_OFFSET = 80;
constexpr uint64_t GNU_CXX_CLASS = 0x474e5543432b2b00ull;  // "GNUCC++\0"; "GNUCC++\1" for a dependent exception

struct EhGlobals {
  char* caught_exceptions;
  unsigned int uncaught_exceptions;
};

// Whether the header layout above is the one this libstdc++ uses, checked once at load on a real exception.
int layout_known = 1;

__attribute__((constructor)) void check_exception_layout() {
  try {
    throw 7;
  } catch (int&) {
    auto* globals = reinterpret_cast<EhGlobals*>(abi::__cxa_get_globals());
    char* header = globals->caught_exceptions;
    auto* unwind = reinterpret_cast<_Unwind_Exception*>(header + UNWIND_HEADER_OFFSET);
    bool ok = *reinterpret_cast<const std::type_info**>(header) == &typeid(int) &&
              *reinterpret_cast<int*>(header + HANDLER_COUNT_OFFSET) == 1 && unwind->exception_class == GNU_CXX_CLASS;
    if (!ok) {
      std::fputs("objc runtime: this C++ runtime's exception header is not the one expected; an exception leaving an "
                 "Objective-C++ @finally may be freed early\n", stderr);
      layout_known = 0;
    }
  }
}

// An exception raised again while it is the innermost caught one with its handler still active is a @finally's
// _Unwind_Resume_or_Rethrow: mark it rethrown, as __cxa_rethrow does, so that the __cxa_end_catch of the
// @finally's cleanup keeps it alive and the next handler's __cxa_begin_catch takes it over.
void mark_finally_rethrow(uint64_t exception_class, _Unwind_Exception* exception) {
  if (!layout_known || (exception_class & ~1ull) != GNU_CXX_CLASS) return;
  auto* globals = reinterpret_cast<EhGlobals*>(abi::__cxa_get_globals());
  char* header = reinterpret_cast<char*>(exception) - UNWIND_HEADER_OFFSET;
  if (globals->caught_exceptions != header) return;
  int* handler_count = reinterpret_cast<int*>(header + HANDLER_COUNT_OFFSET);
  if (*handler_count > 0) {
    *handler_count = -*handler_count;
    globals->uncaught_exceptions++;
  }
}

}  // namespace

extern "C" {

_Unwind_Reason_Code __gxx_personality_v0(int, _Unwind_Action, uint64_t, _Unwind_Exception*, _Unwind_Context*);

OBJC_PUBLIC void objc_exception_throw(id object) {
  id* slot = static_cast<id*>(abi::__cxa_allocate_exception(sizeof(id)));
  // The exception owns a reference: the object outlives the autorelease pools the unwinding leaves.
  *slot = objc_retain(object);
  abi::__cxa_throw(slot, const_cast<objc_eh::__objc_id_type_info*>(&__objc_id_type_info), release_thrown_object);
}

// What clang's Objective-C (not ++) @finally calls with the exception it caught (see the personality below).
OBJC_PUBLIC void objc_exception_rethrow(void* exception) {
  auto* unwind = static_cast<_Unwind_Exception*>(exception);
  mark_finally_rethrow(unwind->exception_class, unwind);
  _Unwind_Resume_or_Rethrow(unwind);
  std::terminate();
}

OBJC_PUBLIC _Unwind_Reason_Code __gnustep_objcxx_personality_v0(int version, _Unwind_Action actions, uint64_t exception_class,
                                                                _Unwind_Exception* exception, _Unwind_Context* context) {
  if (actions & _UA_SEARCH_PHASE) mark_finally_rethrow(exception_class, exception);
  return __gxx_personality_v0(version, actions, exception_class, exception, context);
}

// Objective-C (.m, not .mm) functions with @try or @synchronized: clang names their catch types by class-name
// strings, not type_info objects, which libstdc++'s personality cannot read. Not supported: such code is
// compiled as Objective-C++.
OBJC_PUBLIC _Unwind_Reason_Code __gnustep_objc_personality_v0(int, _Unwind_Action, uint64_t, _Unwind_Exception*,
                                                              _Unwind_Context*) {
  std::fputs("objc runtime: an exception reached Objective-C (.m) code with @try or @synchronized, which this runtime "
             "does not support; compile it as Objective-C++ (.mm)\n", stderr);
  std::abort();
}

OBJC_PUBLIC void* objc_begin_catch(void* exception) { return abi::__cxa_begin_catch(exception); }
OBJC_PUBLIC void objc_end_catch(void) { abi::__cxa_end_catch(); }

// The Objective-C object of the exception being handled, or nil if there is none or it is a C++ exception:
// what Foundation's uncaught-exception report names.
OBJC_PUBLIC id objc_shimkit_current_exception(void) {
  auto* globals = reinterpret_cast<EhGlobals*>(abi::__cxa_get_globals());
  char* header = globals->caught_exceptions;
  if (!layout_known || !header) return nullptr;
  if (*reinterpret_cast<const std::type_info**>(header) != &__objc_id_type_info) return nullptr;
  auto* unwind = reinterpret_cast<_Unwind_Exception*>(header + UNWIND_HEADER_OFFSET);
  if (unwind->exception_class != GNU_CXX_CLASS) return nullptr;
  return *reinterpret_cast<id*>(header + UNWIND_HEADER_OFFSET + sizeof(_Unwind_Exception));
}

}  // extern "C"
