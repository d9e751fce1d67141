// Faults the sanitizers and the runtime must report, one per run (argv[1]): a leaked object, a message to an
// object after its last release, an uncaught NSException, and a clean run for contrast.
#import <Foundation/Foundation.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

// A process-lifetime cache in a static container, as ExecuTorch's Metal shims keep buffers: its destructor runs
// at exit without releasing what it holds, which must not read as a leak.
static std::unordered_map<int, id> static_cache;

// A static whose destructor still sends messages at exit, after the main thread's autorelease pool is gone.
struct ReleasesAtExit {
  id object = nil;
  ~ReleasesAtExit() {
    if ([[NSString stringWithFormat:@"bye %d", 1] length] != 5) std::abort();
    [object release];
  }
};
static ReleasesAtExit releases_at_exit;

@interface LeakedWidget : NSObject {
  double _payload[8];
}
@end

@implementation LeakedWidget
@end

// Not static: a global nothing reads would be optimised away, and the dictionary with it.
id runtime_faults_keep_alive = nil;

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "clean";
  @autoreleasepool {
    if (std::strcmp(mode, "leak") == 0) {
      LeakedWidget* widget = [[LeakedWidget alloc] init];  // never released
      std::fprintf(stderr, "made %p\n", (void*)widget);
    } else if (std::strcmp(mode, "use-after-release") == 0) {
      NSMutableArray* array = [[NSMutableArray alloc] init];
      [array addObject:@1];
      [array release];
      std::fprintf(stderr, "count %lu\n", (unsigned long)[array count]);
    } else if (std::strcmp(mode, "uncaught") == 0) {
      [NSException raise:NSInvalidArgumentException format:@"nobody catches %d", 42];
    } else {
      // Kept for the life of the process through a global: reachable, so no leak.
      runtime_faults_keep_alive = [[NSMutableDictionary alloc] init];
      [runtime_faults_keep_alive setObject:@"value" forKey:@"key"];
      static_cache[1] = [[NSMutableArray alloc] initWithObjects:@"cached", nil];
      releases_at_exit.object = [[NSMutableArray alloc] initWithObjects:@"released at exit", nil];
      std::fprintf(stderr, "clean\n");
    }
  }
  return 0;
}
