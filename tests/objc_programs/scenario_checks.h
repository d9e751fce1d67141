// What the scenario programs (metal_runtime.mm, metal_shaders.mm) check with: a failed check throws Failure, which
// the scenario runner reports as "FAIL <name>: <why>".
#pragma once

#import <Foundation/Foundation.h>

#include <cstring>
#include <functional>
#include <string>

namespace scenario_checks {

struct Failure {
  std::string why;
};

inline void check(bool condition, const std::string& what) {
  if (!condition) throw Failure{what};
}

// `body` must raise an NSException named `name` whose reason contains `part`.
inline void check_raises(NSString* name, const char* part, const std::function<void()>& body) {
  @try {
    body();
  } @catch (NSException* exception) {
    check([[exception name] isEqualToString:name],
          std::string("raised ") + [[exception name] UTF8String] + " instead of " + [name UTF8String]);
    check(strstr([[exception reason] UTF8String], part) != nullptr,
          std::string("the reason '") + [[exception reason] UTF8String] + "' does not say '" + part + "'");
    return;
  }
  throw Failure{std::string("nothing raised; expected ") + [name UTF8String] + " saying '" + part + "'"};
}

}  // namespace scenario_checks
