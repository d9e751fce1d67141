// The Objective-C language on shimkit's runtime and Foundation: one program, many checks (tests/test_objc_runtime.py
// runs it built with AddressSanitizer + UndefinedBehaviorSanitizer). Each failed CHECK prints its line; the last
// line counts them. `runtime_plugin.mm` is a second shared object the program links.
#import <Foundation/Foundation.h>
#include <Block.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

static int checks_passed = 0;
static int checks_failed = 0;

static void check_at(bool ok, int line, const char* text) {
  if (ok) {
    checks_passed++;
  } else {
    checks_failed++;
    std::printf("FAIL runtime_language.mm:%d: %s\n", line, text);
  }
}

static void check_string_at(int line, NSString* actual, const char* expected) {
  bool ok = actual && std::strcmp([actual UTF8String], expected) == 0;
  if (!ok) std::printf("  got \"%s\", expected \"%s\"\n", actual ? [actual UTF8String] : "(nil)", expected);
  check_at(ok, line, expected);
}

// Variadic: ObjC brackets are no parentheses to the preprocessor, so their commas split macro arguments.
#define CHECK(...) check_at((__VA_ARGS__), __LINE__, #__VA_ARGS__)
#define CHECK_STR(...) check_string_at(__LINE__, __VA_ARGS__)

// From runtime_plugin.mm.
extern "C" id plugin_make_counter(void);
extern "C" int plugin_send_value(id object);
extern "C" SEL plugin_value_selector(void);
@interface NSString (PluginShout)
- (NSString*)plugin_shout;
@end

// -- Classes, protocols, categories ----------------------------------------------------------------------------

@protocol Greeter <NSObject>
- (NSString*)greet;
@optional
- (void)wave;
@end

@protocol Unrelated
@end

int animals_deallocated = 0;  // not static: see counted_deallocs

@interface Animal : NSObject <Greeter> {
  int _legs;
}
@property(nonatomic, copy) NSString* name;
@property(nonatomic, retain) id toy;
@property(atomic, retain) id atomicToy;
@property(atomic, copy) NSString* atomicName;
@property(nonatomic, assign) double weight;
@property(nonatomic, readonly) int legs;
@property(nonatomic, getter=isHappy) BOOL happy;
+ (instancetype)animalNamed:(NSString*)name;
- (instancetype)initWithLegs:(int)legs;
- (NSString*)sound;
@end

@implementation Animal
+ (instancetype)animalNamed:(NSString*)name {
  Animal* animal = [[[self alloc] initWithLegs:4] autorelease];
  animal.name = name;
  return animal;
}
- (instancetype)initWithLegs:(int)legs {
  self = [super init];
  _legs = legs;
  return self;
}
- (int)legs {
  return _legs;
}
- (NSString*)sound {
  return @"...";
}
- (NSString*)greet {
  return [NSString stringWithFormat:@"%@ says %@", self.name, [self sound]];
}
- (NSString*)description {
  return [NSString stringWithFormat:@"Animal(%@)", self.name];
}
- (void)dealloc {
  animals_deallocated++;
  [_name release];
  [_toy release];
  [_atomicToy release];
  [_atomicName release];
  [super dealloc];
}
@end

@interface Dog : Animal
+ (instancetype)puppy;
@end

@implementation Dog
+ (instancetype)animalNamed:(NSString*)name {
  Dog* dog = [super animalNamed:[name stringByAppendingString:@" the dog"]];
  return dog;
}
+ (instancetype)puppy {
  return [self animalNamed:@"Rex"];
}
- (NSString*)sound {
  return @"woof";
}
- (NSString*)description {
  return [@"Dog:" stringByAppendingString:[super description]];
}
@end

@interface Animal (Tricks)
- (NSString*)trick;
- (NSString*)sound;  // replaces Animal's own
@end

@implementation Animal (Tricks)
- (NSString*)trick {
  return @"roll over";
}
- (NSString*)sound {
  return @"(category sound)";
}
@end

// A category on a framework class, from the program.
@interface NSString (ProgramAdditions)
- (NSUInteger)program_doubledLength;
@end

@implementation NSString (ProgramAdditions)
- (NSUInteger)program_doubledLength {
  return [self length] * 2;
}
@end

// -- Ivars: non-fragile layout over a framework class, alignment, C++ members -----------------------------------

@interface TaggedArray : NSMutableArray {
 @public
  char _tag;
  double _scale;
  long double _wide;  // 16-byte aligned
  int _marks[3];
}
@end

@implementation TaggedArray
@end

static std::atomic<int> cxx_destructions{0};

struct Tracked {
  std::string text = "constructed";
  ~Tracked() { cxx_destructions++; }
};

@interface CxxHolder : NSObject {
 @public
  std::vector<int> _values;
  Tracked _tracked;
}
@end

@implementation CxxHolder
@end

@interface CxxHolderChild : CxxHolder {
 @public
  std::string _more;
}
@end

@implementation CxxHolderChild
@end

// -- +initialize ------------------------------------------------------------------------------------------------

static std::atomic<int> base_initializations{0};
static std::atomic<int> child_initializations{0};
static std::atomic<bool> slow_ready{false};
static std::atomic<int> slow_initializations{0};

@interface InitBase : NSObject
+ (int)value;
@end

@implementation InitBase
+ (void)initialize {
  if (self == [InitBase class]) base_initializations++;
  else child_initializations++;
}
+ (int)value {
  return 7;
}
@end

@interface InitChild : InitBase
@end

@implementation InitChild
@end

@interface SlowInit : NSObject
+ (bool)ready;
@end

@implementation SlowInit
+ (void)initialize {
  slow_initializations++;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  slow_ready = true;
}
+ (bool)ready {
  return slow_ready;
}
@end

// -- Struct returns and floating point --------------------------------------------------------------------------

struct Big {
  double a, b, c;
};

struct Pair {
  long first, second;
};

@interface Numbers : NSObject
- (Big)bigWith:(double)x;
- (Pair)pairWith:(long)x;
- (NSRange)rangeFrom:(NSUInteger)location;
- (float)mixFloat:(float)a double:(double)b int:(int)c float:(float)d;
- (double)sum10:(double)a1 :(double)a2 :(double)a3 :(double)a4 :(double)a5 :(double)a6 :(double)a7 :(double)a8 :(double)a9 :(double)a10;
- (long)sum8:(long)a1 :(long)a2 :(long)a3 :(long)a4 :(long)a5 :(long)a6 :(long)a7 :(long)a8;
@end

@implementation Numbers
- (Big)bigWith:(double)x {
  return Big{x, x * 2, x * 3};
}
- (Pair)pairWith:(long)x {
  return Pair{x, -x};
}
- (NSRange)rangeFrom:(NSUInteger)location {
  return NSMakeRange(location, location + 1);
}
- (float)mixFloat:(float)a double:(double)b int:(int)c float:(float)d {
  return float(a + b + c + d);
}
- (double)sum10:(double)a1 :(double)a2 :(double)a3 :(double)a4 :(double)a5 :(double)a6 :(double)a7 :(double)a8 :(double)a9 :(double)a10 {
  return a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10;
}
- (long)sum8:(long)a1 :(long)a2 :(long)a3 :(long)a4 :(long)a5 :(long)a6 :(long)a7 :(long)a8 {
  return a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8;
}
@end

// -- Keys -------------------------------------------------------------------------------------------------------

// Keys by identity that copy themselves, as MPSGraphTensor does on Apple.
@interface IdentityKey : NSObject <NSCopying>
@end

@implementation IdentityKey
- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}
@end

// Not NSCopying: the dictionary keeps the key itself.
@interface PlainKey : NSObject
@end

@implementation PlainKey
@end

@interface MyError : NSException
@end

@implementation MyError
@end

// A C++ static initializer sending messages to a class of this program: it may run before the program's own
// classes are loaded (both are entries of .init_array).
@interface EarlyClass : NSObject
+ (int)earlyValue;
- (int)instanceValue;
@end

@implementation EarlyClass
+ (int)earlyValue {
  EarlyClass* object = [[self alloc] init];
  int value = [object instanceValue];
  [object release];
  return value;
}
- (int)instanceValue {
  return 31;
}
@end

static int early_value = [EarlyClass earlyValue];

// -- The checks -------------------------------------------------------------------------------------------------

static void check_classes() {
  CHECK(early_value == 31);
  CHECK([EarlyClass earlyValue] == 31);
  Animal* animal = [[Animal alloc] initWithLegs:2];
  CHECK([animal class] == [Animal class]);
  CHECK(object_getClass(animal) == [Animal class]);
  CHECK(class_isMetaClass(object_getClass([Animal class])));
  CHECK(!class_isMetaClass([Animal class]));
  CHECK(class_getSuperclass([Dog class]) == [Animal class]);
  CHECK([Dog superclass] == [Animal class]);
  CHECK(object_getClass(object_getClass([Dog class])) == object_getClass([NSObject class]));  // the root metaclass
  CHECK(class_getSuperclass(object_getClass([NSObject class])) == [NSObject class]);
  CHECK([animal isKindOfClass:[NSObject class]]);
  CHECK(![animal isKindOfClass:[Dog class]]);
  CHECK([animal isMemberOfClass:[Animal class]]);
  CHECK([Dog isKindOfClass:[NSObject class]]);
  CHECK([Dog isSubclassOfClass:[Animal class]]);
  CHECK_STR(NSStringFromClass([Dog class]), "Dog");
  CHECK(NSClassFromString(@"Dog") == [Dog class]);
  CHECK(objc_getClass("Animal") == [Animal class]);
  CHECK([animal respondsToSelector:@selector(greet)]);
  CHECK(![animal respondsToSelector:@selector(wave)]);
  CHECK([Dog instancesRespondToSelector:@selector(trick)]);
  CHECK([Animal respondsToSelector:@selector(animalNamed:)]);
  CHECK([animal legs] == 2);
  [animal release];
}

static void check_categories_and_protocols() {
  @autoreleasepool {
    Dog* dog = [Dog puppy];
    CHECK_STR(dog.name, "Rex the dog");
    CHECK_STR([dog trick], "roll over");
    CHECK_STR([dog greet], "Rex the dog says woof");
    Animal* cat = [Animal animalNamed:@"Tom"];
    CHECK_STR([cat sound], "(category sound)");
    CHECK([@"abc" program_doubledLength] == 6);
    CHECK([[NSString stringWithUTF8String:"abcd"] program_doubledLength] == 8);
    CHECK([@"a longer constant string" program_doubledLength] == 48);

    CHECK([dog conformsToProtocol:@protocol(Greeter)]);
    CHECK([Dog conformsToProtocol:@protocol(Greeter)]);
    CHECK([dog conformsToProtocol:@protocol(NSObject)]);  // Greeter <NSObject>
    CHECK(![dog conformsToProtocol:@protocol(Unrelated)]);
    CHECK([@"x" conformsToProtocol:@protocol(NSCopying)]);
    CHECK(![[[PlainKey new] autorelease] conformsToProtocol:@protocol(NSCopying)]);
    id<Greeter> greeter = dog;
    CHECK_STR([greeter greet], "Rex the dog says woof");
    CHECK(std::strcmp(protocol_getName(@protocol(Greeter)), "Greeter") == 0);
    CHECK(objc_getProtocol("Greeter") != nil);
    CHECK_STR([(id)@protocol(Greeter) description], "<Protocol: Greeter>");
    CHECK_STR([dog description], "Dog:Animal(Rex the dog)");
  }
}

static void check_ivars() {
  TaggedArray* array = [[TaggedArray alloc] init];
  array->_tag = 'q';
  array->_scale = 2.5;
  array->_wide = 1.25L;
  array->_marks[0] = 1;
  array->_marks[2] = 3;
  for (int i = 0; i < 100; i++) [array addObject:@(i)];
  CHECK([array count] == 100);
  CHECK([array[99] intValue] == 99);
  CHECK(array->_tag == 'q' && array->_scale == 2.5 && array->_wide == 1.25L && array->_marks[2] == 3);
  CHECK(reinterpret_cast<uintptr_t>(&array->_wide) % 16 == 0);
  CHECK(class_getInstanceSize([TaggedArray class]) > class_getInstanceSize([NSMutableArray class]));
  CHECK(ivar_getOffset(class_getInstanceVariable([TaggedArray class], "_tag")) >=
        (ptrdiff_t)class_getInstanceSize([NSMutableArray class]));
  [array release];

  int before = cxx_destructions;
  CxxHolderChild* holder = [[CxxHolderChild alloc] init];
  CHECK(holder->_tracked.text == "constructed");
  holder->_values.assign(1000, 5);
  holder->_more = std::string(200, 'x');
  [holder release];
  CHECK(cxx_destructions == before + 1);
}

static void check_properties() {
  @autoreleasepool {
    Animal* animal = [[[Animal alloc] initWithLegs:4] autorelease];
    NSMutableString* mutable_name = [NSMutableString stringWithString:@"Bo"];
    animal.name = mutable_name;
    [mutable_name appendString:@"b"];
    CHECK_STR(animal.name, "Bo");
    CHECK(animal.name != mutable_name);
    CHECK(![animal.name isKindOfClass:[NSMutableString class]]);

    NSObject* toy = [[NSObject alloc] init];
    animal.toy = toy;
    CHECK([toy retainCount] == 2);
    animal.toy = toy;
    CHECK([toy retainCount] == 2);
    animal.atomicToy = toy;
    CHECK([toy retainCount] == 3);
    CHECK(animal.atomicToy == toy);
    animal.toy = nil;
    animal.atomicToy = nil;
    CHECK([toy retainCount] <= 2);  // the atomic getter's autoreleased reference may still be in the pool
    animal.atomicName = @"atomic";
    CHECK_STR(animal.atomicName, "atomic");
    animal.weight = 12.5;
    CHECK(animal.weight == 12.5);
    animal.happy = YES;
    CHECK(animal.isHappy);
    [toy release];
  }
}

static void check_initialize() {
  CHECK(base_initializations == 0);
  CHECK([InitChild value] == 7);
  CHECK(base_initializations == 1);   // superclass first
  CHECK(child_initializations == 1);  // inherited +initialize runs again for the subclass, as on Apple
  for (int i = 0; i < 10; i++) [InitBase value];
  CHECK(base_initializations == 1);
  CHECK(child_initializations == 1);

  std::vector<std::thread> threads;
  std::atomic<int> saw_ready{0};
  for (int i = 0; i < 4; i++) {
    threads.emplace_back([&saw_ready] {
      if ([SlowInit ready]) saw_ready++;
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(saw_ready == 4);
  CHECK(slow_initializations == 1);
}

static void check_selectors_across_objects() {
  SEL count = @selector(count);
  CHECK(sel_isEqual(count, NSSelectorFromString(@"count")));
  CHECK(sel_getName(count) == sel_getName(sel_registerName("count")));
  NSArray* array = @[@1, @2, @3];
  CHECK((NSUInteger)(uintptr_t)[array performSelector:count] == 3);
  CHECK([array respondsToSelector:NSSelectorFromString(@"objectAtIndex:")]);
  @autoreleasepool {
    id counter = plugin_make_counter();
    CHECK(plugin_send_value(counter) == 1);
    CHECK([[counter performSelector:plugin_value_selector()] intValue] == 2);
    CHECK(sel_isEqual(plugin_value_selector(), @selector(value)));
    CHECK([counter respondsToSelector:@selector(value)]);
    CHECK([counter isKindOfClass:NSClassFromString(@"PluginCounter")]);
    CHECK([counter count] == 2);  // PluginCounter is an NSMutableArray with ivars of its own
    CHECK_STR([@"quiet" plugin_shout], "QUIET!");
    CHECK_STR([[NSString stringWithFormat:@"%d", 5] plugin_shout], "5!");
  }
}

static void check_struct_and_float_returns() {
  Numbers* numbers = [[Numbers alloc] init];
  Big big = [numbers bigWith:1.5];
  CHECK(big.a == 1.5 && big.b == 3.0 && big.c == 4.5);
  Pair pair = [numbers pairWith:9];
  CHECK(pair.first == 9 && pair.second == -9);
  NSRange range = [numbers rangeFrom:4];
  CHECK(range.location == 4 && range.length == 5);
  CHECK([numbers mixFloat:0.5f double:0.25 int:2 float:0.25f] == 3.0f);
  CHECK([numbers sum10:1:2:3:4:5:6:7:8:9:10] == 55.0);
  CHECK([numbers sum8:1:2:3:4:5:6:7:8] == 36);
  CHECK(std::fabs([@(0.1) doubleValue] - 0.1) < 1e-17);
  CHECK([@(2.5f) floatValue] == 2.5f);
  [numbers release];

  Numbers* none = nil;
  Big zero = [none bigWith:3];
  CHECK(zero.a == 0 && zero.b == 0 && zero.c == 0);
  CHECK([none sum10:1:2:3:4:5:6:7:8:9:10] == 0.0);
  CHECK([none mixFloat:1 double:1 int:1 float:1] == 0.0f);
  NSRange nil_range = [none rangeFrom:3];
  CHECK(nil_range.location == 0 && nil_range.length == 0);
  CHECK([(NSArray*)nil count] == 0);
  CHECK([(id)nil description] == nil);
  CHECK([(NSNumber*)nil longLongValue] == 0);
}

static void check_literals() {
  @autoreleasepool {
    NSString* tagged = @"short";
    CHECK(((uintptr_t)tagged & 7) == 4);
    CHECK([tagged length] == 5);
    CHECK([tagged characterAtIndex:1] == 'h');
    CHECK_STR(tagged, "short");
    CHECK([tagged isKindOfClass:[NSString class]]);
    CHECK([tagged isEqual:[NSString stringWithUTF8String:"short"]]);
    CHECK([[NSString stringWithUTF8String:"short"] isEqual:tagged]);
    CHECK([tagged hash] == [[NSString stringWithUTF8String:"short"] hash]);
    CHECK([tagged retain] == tagged);
    [tagged release];
    CHECK([@"" length] == 0);
    CHECK_STR(@"abcdefgh", "abcdefgh");

    NSString* constant = @"a long constant string";
    CHECK([constant isKindOfClass:[NSConstantString class]]);
    CHECK([constant length] == 22);
    CHECK([constant hasPrefix:@"a long"] && [constant hasSuffix:@"string"]);
    CHECK([constant isEqualToString:@"a long constant string"]);
    CHECK_STR(@"caf\u00e9 au lait", "caf\xc3\xa9 au lait");  // clang stores it as UTF-16
    CHECK([constant copy] == constant);

    CHECK([@(42) intValue] == 42);
    CHECK([@(3.5) doubleValue] == 3.5);
    CHECK([@YES boolValue] && ![@NO boolValue]);
    CHECK([@(-7L) longValue] == -7);
    CHECK([@(123456789012LL) longLongValue] == 123456789012LL);
    CHECK([@(18446744073709551615ULL) unsignedLongLongValue] == 18446744073709551615ULL);
    CHECK([@('a') charValue] == 'a');
    CHECK([@(1) isEqual:@(1.0)] && [@(1) hash] == [@(1.0) hash]);
    CHECK(![@(1) isEqual:@(1.5)]);
    CHECK([[NSNumber numberWithUnsignedInt:4000000000u] unsignedIntValue] == 4000000000u);
    CHECK([[NSNumber numberWithInteger:-3] integerValue] == -3);
    CHECK([[NSNumber numberWithUnsignedInteger:3] unsignedIntegerValue] == 3);
    CHECK_STR([@(3.5) description], "3.5");
    CHECK_STR([@(0.1) description], "0.1");
    CHECK_STR([@(-12) stringValue], "-12");

    NSArray* array = @[@"a", @2, @[@3]];
    CHECK([array count] == 3);
    CHECK([array[2][0] intValue] == 3);
    NSDictionary* dictionary = @{@"one": @1, @2: @"two", @"nested": @{@"k": @"v"}};
    CHECK([dictionary count] == 3);
    CHECK([dictionary[@"one"] intValue] == 1);
    CHECK_STR(dictionary[@2], "two");
    CHECK_STR(dictionary[@"nested"][@"k"], "v");
    CHECK(dictionary[@"missing"] == nil);
    CHECK([dictionary[@(2.0)] isEqual:@"two"]);  // numbers compare by value
  }
}

static void check_collections() {
  @autoreleasepool {
    NSMutableArray* array = [NSMutableArray arrayWithCapacity:2];
    for (int i = 0; i < 10; i++) [array addObject:@(i)];
    array[0] = @100;
    array[10] = @10;  // one past the end appends
    CHECK([array count] == 11);
    CHECK([array[0] intValue] == 100 && [[array lastObject] intValue] == 10 && [[array firstObject] intValue] == 100);
    [array removeObjectAtIndex:0];
    [array insertObject:@(-1) atIndex:0];
    CHECK([array indexOfObject:@5] == 5);
    CHECK([array containsObject:@9]);
    long sum = 0;
    for (NSNumber* number in array) sum += [number longValue];
    CHECK(sum == -1 + 45 - 0 + 10);
    CHECK_STR([@[@1, @"b"] componentsJoinedByString:@","], "1,b");
    CHECK([[array subarrayWithRange:NSMakeRange(1, 3)] count] == 3);
    __block long block_sum = 0;
    [array enumerateObjectsUsingBlock:^(id object, NSUInteger index, BOOL* stop) {
      block_sum += [object longValue];
      if (index == 2) *stop = YES;
    }];
    CHECK(block_sum == -1 + 1 + 2);
    CHECK([@[@1, @2] isEqual:@[@1, @2]]);
    NSArray* copy = [array copy];
    CHECK([copy count] == [array count] && ![copy isKindOfClass:[NSMutableArray class]]);
    [copy release];

    bool raised = false;
    @try {
      for (id object in array) {
        (void)object;
        [array addObject:@0];
      }
    } @catch (NSException* e) {
      raised = [[e name] isEqualToString:NSGenericException];
    }
    CHECK(raised);

    raised = false;
    @try {
      [array objectAtIndex:1000];
    } @catch (NSException* e) {
      raised = [[e name] isEqualToString:NSRangeException];
    }
    CHECK(raised);

    NSMutableDictionary* dictionary = [NSMutableDictionary dictionary];
    for (int i = 0; i < 50; i++) dictionary[@(i)] = [NSString stringWithFormat:@"v%d", i];
    CHECK([dictionary count] == 50);
    CHECK_STR(dictionary[@(49)], "v49");
    dictionary[@(49)] = nil;
    [dictionary removeObjectForKey:@(48)];
    CHECK([dictionary count] == 48 && dictionary[@(49)] == nil);
    long key_sum = 0;
    for (NSNumber* key in dictionary) key_sum += [key longValue];
    CHECK(key_sum == 47 * 48 / 2);
    CHECK([[dictionary allKeys] count] == 48 && [[dictionary allValues] count] == 48);
    CHECK([[dictionary allKeys][0] intValue] == 0);  // insertion order

    IdentityKey* first = [[IdentityKey new] autorelease];
    IdentityKey* second = [[IdentityKey new] autorelease];
    NSMutableDictionary* by_identity = [NSMutableDictionary dictionary];
    by_identity[first] = @"first";
    by_identity[second] = @"second";
    CHECK([by_identity count] == 2);
    CHECK_STR(by_identity[first], "first");
    CHECK([[by_identity allKeys] indexOfObjectIdenticalTo:first] != NSNotFound);
    PlainKey* plain = [[PlainKey new] autorelease];
    [by_identity setObject:@"plain" forKey:(id<NSCopying>)plain];
    CHECK_STR(by_identity[plain], "plain");
    NSDictionary* frozen = [by_identity copy];
    CHECK([frozen isEqual:by_identity] && [frozen count] == 3);
    [frozen release];
    NSMutableString* key = [NSMutableString stringWithString:@"mutable"];
    by_identity[key] = @1;
    [key appendString:@"!"];
    CHECK(by_identity[@"mutable"] != nil);  // the dictionary copied the key

    NSEnumerator* enumerator = [@[@1, @2, @3] objectEnumerator];
    long enumerated = 0;
    for (NSNumber* number in enumerator) enumerated += [number longValue];
    CHECK(enumerated == 6);

    NSMutableData* data = [NSMutableData dataWithLength:4];
    static const char tail[] = "xyz";
    [data appendBytes:tail length:3];
    CHECK([data length] == 7 && std::memcmp((const char*)[data bytes] + 4, "xyz", 3) == 0);
    __block bool freed = false;
    void* buffer = std::malloc(16);
    NSData* wrapped = [[NSData alloc] initWithBytesNoCopy:buffer length:16 deallocator:^(void* bytes, NSUInteger) {
      std::free(bytes);
      freed = true;
    }];
    [wrapped release];
    CHECK(freed);
  }
}

static void check_strings() {
  @autoreleasepool {
    NSString* formatted = [NSString stringWithFormat:@"%d %ld %lld %s %.2f %zu %@ %x %5.1f|%-3d|%%", -3, 40L, 5000000000LL, "cstr",
                                                     3.14159, (size_t)17, @[@1], 255, 2.25, 7];
    CHECK_STR(formatted, "-3 40 5000000000 cstr 3.14 17 (\n    1\n) ff   2.2|7  |%");
    NSString* pointer = [NSString stringWithFormat:@"%p", (void*)0x1234];
    CHECK_STR(pointer, "0x1234");
    CHECK_STR([NSString stringWithFormat:@"%@ and %@", nil, @"x"], "(null) and x");
    NSMutableString* text = [NSMutableString string];
    [text appendFormat:@"%d-%@", 1, @"two"];
    [text appendString:@"-three"];
    CHECK_STR(text, "1-two-three");
    CHECK([text length] == 11);
    CHECK_STR([text substringFromIndex:6], "three");
    CHECK_STR([text stringByReplacingOccurrencesOfString:@"-" withString:@"+"], "1+two+three");
    CHECK([[text componentsSeparatedByString:@"-"] count] == 3);
    CHECK([text rangeOfString:@"two"].location == 2);
    CHECK([@"42" intValue] == 42 && [@"2.5" doubleValue] == 2.5);
    CHECK([@"b" compare:@"a"] == NSOrderedDescending);
    CHECK([[text copy] autorelease] != text);
    NSString* immutable = [NSString stringWithUTF8String:"same"];
    CHECK([[immutable copy] autorelease] == immutable);
    CHECK_STR([[@"ab" mutableCopy] autorelease], "ab");
    NSError* error = [NSError errorWithDomain:@"test.domain" code:7 userInfo:nil];
    CHECK([error code] == 7 && [[error domain] isEqualToString:@"test.domain"]);
    CHECK([[error localizedDescription] containsString:@"test.domain error 7"]);
    NSError* described = [NSError errorWithDomain:@"d" code:1 userInfo:@{NSLocalizedDescriptionKey: @"went wrong"}];
    CHECK_STR([described localizedDescription], "went wrong");
  }
}

// Not static: clang ends an @autoreleasepool with an LLVM intrinsic that LLVM at -O2 takes to leave a file's
// static variables alone, so a -dealloc's write to one could be read as the value before the pool ended.
int counted_deallocs = 0;

@interface Counted : NSObject
@end

@implementation Counted
- (void)dealloc {
  counted_deallocs++;
  [super dealloc];
}
@end

static void check_memory() {
  Counted* object = [[Counted alloc] init];
  CHECK([object retainCount] == 1);
  [object retain];
  CHECK([object retainCount] == 2);
  [object release];
  CHECK(counted_deallocs == 0);
  @autoreleasepool {
    [[object retain] autorelease];
    CHECK([object retainCount] == 2);
    @autoreleasepool {
      [[[Counted alloc] init] autorelease];
      CHECK(counted_deallocs == 0);
    }
    CHECK(counted_deallocs == 1);
  }
  CHECK([object retainCount] == 1);
  [object release];
  CHECK(counted_deallocs == 2);

  NSAutoreleasePool* pool = [[NSAutoreleasePool alloc] init];
  [[[Counted alloc] init] autorelease];
  [pool drain];
  CHECK(counted_deallocs == 3);

  // A pool left by an exception is drained by the enclosing one.
  @autoreleasepool {
    @try {
      @autoreleasepool {
        [[[Counted alloc] init] autorelease];
        [NSException raise:NSGenericException format:@"leave the pool"];
      }
    } @catch (NSException*) {
    }
  }
  CHECK(counted_deallocs == 4);

  std::thread worker([] {
    @autoreleasepool {
      for (int i = 0; i < 10; i++) [[[Counted alloc] init] autorelease];
    }
    [[[Counted alloc] init] autorelease];  // outside any pool: drained when the thread ends
  });
  worker.join();
  CHECK(counted_deallocs == 15);

  static const char key = 0;
  Counted* owner = [[Counted alloc] init];
  Counted* attached = [[Counted alloc] init];
  objc_setAssociatedObject(owner, &key, attached, OBJC_ASSOCIATION_RETAIN);
  [attached release];
  CHECK(objc_getAssociatedObject(owner, &key) == attached);
  [owner release];
  CHECK(counted_deallocs == 17);
  objc_setAssociatedObject([Counted class], &key, @"on a class", OBJC_ASSOCIATION_ASSIGN);
  CHECK(objc_getAssociatedObject([Counted class], &key) == @"on a class");
}

static void check_exceptions() {
  bool caught = false, finally_ran = false;
  @try {
    [NSException raise:NSInvalidArgumentException format:@"bad value %d", 3];
  } @catch (NSException* e) {
    caught = [[e name] isEqualToString:NSInvalidArgumentException] && [[e reason] isEqualToString:@"bad value 3"];
  } @finally {
    finally_ran = true;
  }
  CHECK(caught && finally_ran);

  caught = false;
  @try {
    @throw [MyError exceptionWithName:@"Mine" reason:@"sub" userInfo:@{@"k": @1}];
  } @catch (NSString* s) {
    caught = false;
  } @catch (NSException* e) {
    caught = [e isKindOfClass:[MyError class]] && [[e userInfo][@"k"] intValue] == 1;
  }
  CHECK(caught);

  caught = false;
  @try {
    @throw @"a string, not an NSException";
  } @catch (NSException* e) {
    caught = false;
  } @catch (id e) {
    caught = [e isKindOfClass:[NSString class]];
  }
  CHECK(caught);

  // A C++ exception passes @catch clauses (their @finally runs) to the C++ handler.
  bool objc_caught = false, cxx_caught = false;
  finally_ran = false;
  try {
    @try {
      throw std::runtime_error("from C++");
    } @catch (NSException* e) {
      objc_caught = true;
    } @finally {
      finally_ran = true;
    }
  } catch (const std::runtime_error& e) {
    cxx_caught = std::strcmp(e.what(), "from C++") == 0;
  }
  CHECK(!objc_caught && cxx_caught && finally_ran);

  // An NSException passes a @finally and C++ handlers of other types, to a C++ catch (...).
  finally_ran = false;
  bool any_caught = false;
  try {
    try {
      @try {
        [NSException raise:NSGenericException format:@"through"];
      } @finally {
        finally_ran = true;
      }
    } catch (const std::exception&) {
      any_caught = false;
    }
  } catch (...) {
    any_caught = true;
  }
  CHECK(finally_ran && any_caught);

  // Through two @finally blocks, one inside the other, for both kinds of exception.
  int finals = 0;
  std::string reached;
  try {
    @try {
      @try {
        throw std::logic_error("nested");
      } @finally {
        finals++;
      }
    } @finally {
      finals++;
    }
  } catch (const std::logic_error& e) {
    reached = e.what();
  }
  @try {
    @try {
      @try {
        [NSException raise:NSGenericException format:@"nested"];
      } @finally {
        finals++;
      }
    } @finally {
      finals++;
    }
  } @catch (NSException* e) {
    reached += [[e reason] UTF8String];
  }
  CHECK(finals == 4 && reached == "nestednested");

  // Rethrown from a @catch, caught again outside.
  caught = false;
  @try {
    @try {
      [NSException raise:NSGenericException format:@"again"];
    } @catch (NSException* e) {
      @throw;
    }
  } @catch (NSException* e) {
    caught = [[e reason] isEqualToString:@"again"];
  }
  CHECK(caught);

  // Unrecognized selectors raise NSInvalidArgumentException.
  caught = false;
  @try {
    [(id)[[[NSObject alloc] init] autorelease] performSelector:@selector(noSuchMethod)];
  } @catch (NSException* e) {
    caught = [[e name] isEqualToString:NSInvalidArgumentException] && [[e reason] containsString:@"unrecognized selector"];
  }
  CHECK(caught);

  // The exception_ptr pattern of ExecuTorch's Metal shims: an exception inside dispatch_sync, rethrown outside.
  dispatch_queue_t queue = dispatch_queue_create("test.queue", DISPATCH_QUEUE_SERIAL);
  __block std::optional<std::exception_ptr> pending;
  dispatch_sync(queue, ^{
    try {
      @try {
        [NSException raise:NSInternalInconsistencyException format:@"inside the queue"];
      } @catch (NSException* e) {
        throw std::runtime_error(std::string("converted: ") + [[e reason] UTF8String]);
      }
    } catch (...) {
      pending = std::current_exception();
    }
  });
  dispatch_release(queue);
  std::string message;
  try {
    if (pending) std::rethrow_exception(*pending);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  CHECK(message == "converted: inside the queue");
}

static void check_synchronized_and_blocks() {
  NSObject* lock = [[NSObject alloc] init];
  long counter = 0;
  long* counter_ptr = &counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([lock, counter_ptr] {
      for (int i = 0; i < 5000; i++) {
        @synchronized(lock) {
          @synchronized(lock) {
            (*counter_ptr)++;
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(counter == 20000);
  @try {
    @synchronized(lock) {
      [NSException raise:NSGenericException format:@"inside @synchronized"];
    }
  } @catch (NSException*) {
  }
  bool relocked = false;
  std::thread other([lock, &relocked] {
    @synchronized(lock) {
      relocked = true;
    }
  });
  other.join();
  CHECK(relocked);
  [lock release];

  __block int total = 0;
  dispatch_queue_t queue = dispatch_queue_create("blocks", DISPATCH_QUEUE_SERIAL);
  for (int i = 1; i <= 10; i++) {
    dispatch_sync(queue, ^{
      total += i;
    });
  }
  dispatch_async(queue, ^{
    total += 100;
  });
  CHECK(total == 155);
  dispatch_sync(dispatch_get_main_queue(), ^{
    total += 1;
  });
  CHECK(total == 156);
  dispatch_release(queue);

  static dispatch_once_t once;
  __block int once_count = 0;
  for (int i = 0; i < 3; i++) dispatch_once(&once, ^{
    once_count++;
  });
  CHECK(once_count == 1);

  @autoreleasepool {
    int captured = 41;
    int (^add)(int) = ^(int x) {
      return x + captured;
    };
    id copied = [(id)add copy];
    NSArray* blocks = @[copied];
    int (^back)(int) = blocks[0];
    CHECK(back(1) == 42);
    CHECK([copied isKindOfClass:[NSObject class]]);
    [copied release];
    void (^heap)(void) = Block_copy(^{
      total++;
    });
    heap();
    Block_release(heap);
    CHECK(total == 157);
  }
}

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // a sanitizer's report ends the process with _exit
  @autoreleasepool {
    check_initialize();
    check_classes();
    check_categories_and_protocols();
    check_ivars();
    check_properties();
    check_selectors_across_objects();
    check_struct_and_float_returns();
    check_literals();
    check_collections();
    check_strings();
    check_memory();
    check_exceptions();
    check_synchronized_and_blocks();
    CHECK(animals_deallocated == 4);  // every Animal made above is gone
  }
  std::printf("checks: %d passed, %d failed\n", checks_passed, checks_failed);
  return checks_failed ? 1 : 0;
}
