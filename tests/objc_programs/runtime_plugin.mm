// A second shared object for runtime_language.mm: a class over a framework class with ivars of its own, a
// category on NSString, and the selectors they use, all from another object than the program's.
#import <Foundation/Foundation.h>

#include <cctype>
#include <string>

@interface PluginCounter : NSMutableArray {
  int _value;
  double _padding[3];
}
- (NSNumber*)value;
@end

@implementation PluginCounter
- (NSNumber*)value {
  _value++;
  [self addObject:@(_value)];
  return @(_value);
}
@end

@implementation NSString (PluginShout)
- (NSString*)plugin_shout {
  std::string text([self UTF8String]);
  for (char& c : text) c = char(std::toupper((unsigned char)c));
  return [NSString stringWithFormat:@"%s!", text.c_str()];
}
@end

extern "C" id plugin_make_counter(void) {
  return [[[PluginCounter alloc] init] autorelease];
}

extern "C" int plugin_send_value(id object) {
  return [[object value] intValue];
}

extern "C" SEL plugin_value_selector(void) {
  return @selector(value);
}
