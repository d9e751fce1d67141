// NSString and its concrete classes, NSMutableString, and string formatting.
//
// NSString has no ivars (clang lays out NSConstantString objects itself, right after the isa); every string
// answers -UTF8String and -length (its UTF-8 bytes), and NSString's methods are written over those two.
// Concrete classes: NSShimkitString (what +alloc on NSString makes: owned, NUL-terminated UTF-8),
// NSMutableString, NSConstantString (clang's literals), NSTaggedPointerString (clang's short literals).
#import "private.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

NSUInteger shimkit_hash_bytes(const void* bytes, size_t length) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const unsigned char* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < length; i++) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return NSUInteger(hash);
}

const char* shimkit_utf8(id object) {
  if (!object) return "(null)";
  if ([object isKindOfClass:[NSString class]]) return [(NSString*)object UTF8String];
  NSString* description = [object description];
  return description ? [description UTF8String] : "(null)";
}

// -- Formatting -------------------------------------------------------------------------------------------------

namespace {

template <typename T>
void append_formatted(std::string& out, const std::string& spec, T value) {
  int size = std::snprintf(nullptr, 0, spec.c_str(), value);
  if (size <= 0) return;
  size_t start = out.size();
  out.resize(start + size_t(size) + 1);
  std::snprintf(&out[start], size_t(size) + 1, spec.c_str(), value);
  out.resize(start + size_t(size));
}

}  // namespace

// Each conversion is read with its own type and printed by snprintf, so the va_list is consumed exactly as
// printf would; %@ prints the object's -description.
std::string shimkit_format(NSString* format, va_list arguments) {
  va_list args;
  va_copy(args, arguments);
  std::string out;
  const char* f = format ? [format UTF8String] : "(null)";
  while (*f) {
    if (*f != '%') {
      out += *f++;
      continue;
    }
    const char* start = f++;
    if (*f == '%') {
      out += '%';
      f++;
      continue;
    }
    std::string spec = "%";
    while (*f && std::strchr("-+ #0'", *f)) spec += *f++;
    if (*f == '*') {
      spec += std::to_string(va_arg(args, int));
      f++;
    } else {
      while (*f >= '0' && *f <= '9') spec += *f++;
    }
    if (*f == '.') {
      spec += *f++;
      if (*f == '*') {
        spec += std::to_string(va_arg(args, int));
        f++;
      } else {
        while (*f >= '0' && *f <= '9') spec += *f++;
      }
    }
    enum { NONE, HH, H, L, LL, Z, J, T, LD } size = NONE;
    if (f[0] == 'h' && f[1] == 'h') size = HH, f += 2;
    else if (f[0] == 'l' && f[1] == 'l') size = LL, f += 2;
    else if (*f == 'h') size = H, f++;
    else if (*f == 'l') size = L, f++;
    else if (*f == 'q') size = LL, f++;
    else if (*f == 'z') size = Z, f++;
    else if (*f == 'j') size = J, f++;
    else if (*f == 't') size = T, f++;
    else if (*f == 'L') size = LD, f++;
    char conversion = *f;
    if (!conversion) {
      out.append(start);
      break;
    }
    f++;
    switch (conversion) {
      case '@': {
        id object = va_arg(args, id);
        out += object ? shimkit_utf8(object) : "(null)";
        break;
      }
      case 'd':
      case 'i':
        switch (size) {
          case L: case Z: case T: case J: append_formatted(out, spec + "ld", va_arg(args, long)); break;
          case HH: append_formatted(out, spec + "d", (int)(signed char)va_arg(args, int)); break;
          case H: append_formatted(out, spec + "d", (int)(short)va_arg(args, int)); break;
          case LL: append_formatted(out, spec + "lld", va_arg(args, long long)); break;
          default: append_formatted(out, spec + "d", va_arg(args, int)); break;
        }
        break;
      case 'o':
      case 'u':
      case 'x':
      case 'X': {
        std::string tail(1, conversion);
        switch (size) {
          case L: case Z: case T: case J: append_formatted(out, spec + "l" + tail, va_arg(args, unsigned long)); break;
          case LL: append_formatted(out, spec + "ll" + tail, va_arg(args, unsigned long long)); break;
          case HH: append_formatted(out, spec + tail, (unsigned)(unsigned char)va_arg(args, unsigned)); break;
          case H: append_formatted(out, spec + tail, (unsigned)(unsigned short)va_arg(args, unsigned)); break;
          default: append_formatted(out, spec + tail, va_arg(args, unsigned)); break;
        }
        break;
      }
      case 'c':
      case 'C': {
        int c = va_arg(args, int);
        append_formatted(out, spec + "c", c < 256 ? c : '?');
        break;
      }
      case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case 'a': case 'A':
        if (size == LD) append_formatted(out, spec + "L" + conversion, va_arg(args, long double));
        else append_formatted(out, spec + conversion, va_arg(args, double));
        break;
      case 's': {
        const char* text = va_arg(args, const char*);
        append_formatted(out, spec + "s", text ? text : "(null)");
        break;
      }
      case 'p':
        append_formatted(out, spec + "p", va_arg(args, void*));
        break;
      case 'n':
        (void)va_arg(args, void*);
        break;
      default:
        out.append(start, size_t(f - start));
        break;
    }
  }
  va_end(args);
  return out;
}

// -- NSString ---------------------------------------------------------------------------------------------------

@interface NSString ()
// Takes a malloc'd, NUL-terminated buffer of `length` bytes: what every initialiser ends in.
- (instancetype)shimkit_initWithOwnedBytes:(char*)bytes length:(NSUInteger)length;
@end

@interface NSShimkitString : NSString {
 @public
  char* _bytes;
  NSUInteger _length;
}
@end

@interface NSTaggedPointerString : NSString
@end

static char* copy_bytes(const char* bytes, size_t length) {
  char* copy = static_cast<char*>(std::malloc(length + 1));
  if (length) std::memcpy(copy, bytes, length);
  copy[length] = 0;
  return copy;
}

NSString* shimkit_string(const char* bytes, size_t length) {
  return [[[NSShimkitString alloc] shimkit_initWithOwnedBytes:copy_bytes(bytes, length) length:length] autorelease];
}

static void raise_range(NSString* what, NSUInteger index, NSUInteger length) {
  [NSException raise:NSRangeException format:@"%@: index %lu beyond bounds [0 .. %lu)", what, (unsigned long)index,
                                             (unsigned long)length];
}

@implementation NSString

+ (instancetype)allocWithZone:(NSZone*)zone {
  if (self == [NSString class]) return class_createInstance([NSShimkitString class], 0);
  return [super allocWithZone:zone];
}

+ (instancetype)string {
  return [[[self alloc] init] autorelease];
}

+ (instancetype)stringWithString:(NSString*)string {
  return [[[self alloc] initWithString:string] autorelease];
}

+ (instancetype)stringWithUTF8String:(const char*)bytes {
  return [[[self alloc] initWithUTF8String:bytes] autorelease];
}

+ (instancetype)stringWithCString:(const char*)bytes encoding:(NSStringEncoding)encoding {
  return [[[self alloc] initWithCString:bytes encoding:encoding] autorelease];
}

+ (instancetype)stringWithFormat:(NSString*)format, ... {
  va_list args;
  va_start(args, format);
  NSString* result = [[[self alloc] initWithFormat:format arguments:args] autorelease];
  va_end(args);
  return result;
}

- (instancetype)shimkit_initWithOwnedBytes:(char*)bytes length:(NSUInteger)length {
  std::free(bytes);
  [self release];
  [NSException raise:NSInternalInconsistencyException format:@"%s cannot be initialised", class_getName(object_getClass(self))];
  return nil;
}

- (instancetype)init {
  return [self shimkit_initWithOwnedBytes:copy_bytes("", 0) length:0];
}

- (instancetype)initWithString:(NSString*)string {
  if (!string) {
    [self release];
    [NSException raise:NSInvalidArgumentException format:@"-[NSString initWithString:]: nil argument"];
  }
  return [self shimkit_initWithOwnedBytes:copy_bytes([string UTF8String], [string length]) length:[string length]];
}

- (instancetype)initWithUTF8String:(const char*)bytes {
  if (!bytes) {
    [self release];
    return nil;
  }
  size_t length = std::strlen(bytes);
  return [self shimkit_initWithOwnedBytes:copy_bytes(bytes, length) length:length];
}

- (instancetype)initWithCString:(const char*)bytes encoding:(NSStringEncoding)encoding {
  return [self initWithUTF8String:bytes];
}

- (instancetype)initWithBytes:(const void*)bytes length:(NSUInteger)length encoding:(NSStringEncoding)encoding {
  return [self shimkit_initWithOwnedBytes:copy_bytes(static_cast<const char*>(bytes), length) length:length];
}

- (instancetype)initWithFormat:(NSString*)format, ... {
  va_list args;
  va_start(args, format);
  self = [self initWithFormat:format arguments:args];
  va_end(args);
  return self;
}

- (instancetype)initWithFormat:(NSString*)format arguments:(va_list)args {
  std::string text = shimkit_format(format, args);
  return [self shimkit_initWithOwnedBytes:copy_bytes(text.data(), text.size()) length:text.size()];
}

- (NSUInteger)length {
  return std::strlen([self UTF8String]);
}

- (const char*)UTF8String {
  [self doesNotRecognizeSelector:_cmd];
  return "";
}

- (unichar)characterAtIndex:(NSUInteger)index {
  NSUInteger length = [self length];
  if (index >= length) raise_range(@"-[NSString characterAtIndex:]", index, length);
  return (unsigned char)[self UTF8String][index];
}

- (const char*)cStringUsingEncoding:(NSStringEncoding)encoding {
  return [self UTF8String];
}

- (NSUInteger)lengthOfBytesUsingEncoding:(NSStringEncoding)encoding {
  return [self length];
}

- (NSString*)description {
  return self;
}

- (NSUInteger)hash {
  return shimkit_hash_bytes([self UTF8String], [self length]);
}

- (BOOL)isEqual:(id)object {
  if (object == self) return YES;
  return [object isKindOfClass:[NSString class]] && [self isEqualToString:object];
}

- (BOOL)isEqualToString:(NSString*)other {
  if (other == self) return YES;
  if (!other) return NO;
  NSUInteger length = [self length];
  return length == [other length] && std::memcmp([self UTF8String], [other UTF8String], length) == 0;
}

- (NSComparisonResult)compare:(NSString*)other {
  int order = std::strcmp([self UTF8String], other ? [other UTF8String] : "");
  return order < 0 ? NSOrderedAscending : order > 0 ? NSOrderedDescending : NSOrderedSame;
}

- (BOOL)hasPrefix:(NSString*)prefix {
  NSUInteger length = [prefix length];
  return length <= [self length] && std::memcmp([self UTF8String], [prefix UTF8String], length) == 0;
}

- (BOOL)hasSuffix:(NSString*)suffix {
  NSUInteger length = [suffix length], own = [self length];
  return length <= own && std::memcmp([self UTF8String] + own - length, [suffix UTF8String], length) == 0;
}

- (NSRange)rangeOfString:(NSString*)other {
  std::string_view haystack([self UTF8String], [self length]);
  std::string_view needle([other UTF8String], [other length]);
  size_t found = needle.empty() ? std::string_view::npos : haystack.find(needle);
  return found == std::string_view::npos ? NSMakeRange(NSNotFound, 0) : NSMakeRange(found, needle.size());
}

- (BOOL)containsString:(NSString*)other {
  return [self rangeOfString:other].location != NSNotFound;
}

- (NSString*)substringWithRange:(NSRange)range {
  NSUInteger length = [self length];
  if (range.location > length || range.length > length - range.location)
    raise_range(@"-[NSString substringWithRange:]", NSMaxRange(range), length);
  return shimkit_string([self UTF8String] + range.location, range.length);
}

- (NSString*)substringFromIndex:(NSUInteger)from {
  return [self substringWithRange:NSMakeRange(from, [self length] - MIN(from, [self length]))];
}

- (NSString*)substringToIndex:(NSUInteger)to {
  return [self substringWithRange:NSMakeRange(0, to)];
}

- (NSString*)stringByAppendingString:(NSString*)other {
  std::string text([self UTF8String], [self length]);
  text.append([other UTF8String], [other length]);
  return shimkit_string(text);
}

- (NSString*)stringByAppendingFormat:(NSString*)format, ... {
  va_list args;
  va_start(args, format);
  std::string text([self UTF8String], [self length]);
  text += shimkit_format(format, args);
  va_end(args);
  return shimkit_string(text);
}

- (NSString*)stringByReplacingOccurrencesOfString:(NSString*)target withString:(NSString*)replacement {
  std::string text([self UTF8String], [self length]);
  std::string from([target UTF8String], [target length]), to([replacement UTF8String], [replacement length]);
  if (from.empty()) return shimkit_string(text);
  std::string result;
  size_t position = 0;
  for (size_t found; (found = text.find(from, position)) != std::string::npos; position = found + from.size()) {
    result.append(text, position, found - position);
    result += to;
  }
  result.append(text, position, std::string::npos);
  return shimkit_string(result);
}

- (NSArray<NSString*>*)componentsSeparatedByString:(NSString*)separator {
  std::string text([self UTF8String], [self length]);
  std::string by([separator UTF8String], [separator length]);
  NSMutableArray* parts = [NSMutableArray array];
  size_t position = 0;
  if (!by.empty()) {
    for (size_t found; (found = text.find(by, position)) != std::string::npos; position = found + by.size())
      [parts addObject:shimkit_string(text.data() + position, found - position)];
  }
  [parts addObject:shimkit_string(text.data() + position, text.size() - position)];
  return [NSArray arrayWithArray:parts];
}

- (int)intValue {
  return int(std::strtol([self UTF8String], nullptr, 10));
}

- (NSInteger)integerValue {
  return std::strtol([self UTF8String], nullptr, 10);
}

- (long long)longLongValue {
  return std::strtoll([self UTF8String], nullptr, 10);
}

- (float)floatValue {
  return std::strtof([self UTF8String], nullptr);
}

- (double)doubleValue {
  return std::strtod([self UTF8String], nullptr);
}

- (BOOL)boolValue {
  const char* text = [self UTF8String];
  while (*text == ' ' || *text == '\t' || *text == '+' || *text == '-' || *text == '0') text++;
  return *text == 'Y' || *text == 'y' || *text == 'T' || *text == 't' || (*text >= '1' && *text <= '9');
}

// Immutable strings are their own copies.
- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}

- (id)mutableCopyWithZone:(NSZone*)zone {
  return [[NSMutableString alloc] initWithString:self];
}

@end

@implementation NSShimkitString

- (instancetype)shimkit_initWithOwnedBytes:(char*)bytes length:(NSUInteger)length {
  std::free(_bytes);
  _bytes = bytes;
  _length = length;
  return self;
}

- (void)dealloc {
  std::free(_bytes);
  [super dealloc];
}

- (NSUInteger)length {
  return _length;
}

- (const char*)UTF8String {
  return _bytes;
}

@end

// -- NSMutableString --------------------------------------------------------------------------------------------

@implementation NSMutableString {
  std::string* _text;
}

+ (instancetype)stringWithCapacity:(NSUInteger)capacity {
  return [[[self alloc] initWithCapacity:capacity] autorelease];
}

- (instancetype)initWithCapacity:(NSUInteger)capacity {
  self = [self init];
  _text->reserve(capacity);
  return self;
}

- (instancetype)shimkit_initWithOwnedBytes:(char*)bytes length:(NSUInteger)length {
  if (!_text) _text = new std::string;
  _text->assign(bytes, length);
  std::free(bytes);
  return self;
}

- (void)dealloc {
  delete _text;
  [super dealloc];
}

- (NSUInteger)length {
  return _text->size();
}

// Valid until the string is next changed.
- (const char*)UTF8String {
  return _text->c_str();
}

- (void)appendString:(NSString*)string {
  if (!string) [NSException raise:NSInvalidArgumentException format:@"-[NSMutableString appendString:]: nil argument"];
  _text->append([string UTF8String], [string length]);
}

- (void)appendFormat:(NSString*)format, ... {
  va_list args;
  va_start(args, format);
  *_text += shimkit_format(format, args);
  va_end(args);
}

- (void)setString:(NSString*)string {
  _text->assign([string UTF8String], [string length]);
}

- (void)insertString:(NSString*)string atIndex:(NSUInteger)index {
  if (index > _text->size()) raise_range(@"-[NSMutableString insertString:atIndex:]", index, _text->size());
  _text->insert(index, [string UTF8String], [string length]);
}

- (void)deleteCharactersInRange:(NSRange)range {
  if (range.location > _text->size() || range.length > _text->size() - range.location)
    raise_range(@"-[NSMutableString deleteCharactersInRange:]", NSMaxRange(range), _text->size());
  _text->erase(range.location, range.length);
}

- (id)copyWithZone:(NSZone*)zone {
  return [[NSString alloc] initWithString:self];
}

@end

// -- Literals ---------------------------------------------------------------------------------------------------

// Literals are static data: never counted, never freed.
#define SHIMKIT_STATIC_OBJECT                   \
  -(instancetype)retain {                       \
    return self;                                \
  }                                             \
  -(oneway void)release {}                      \
  -(instancetype)autorelease {                  \
    return self;                                \
  }                                             \
  -(NSUInteger)retainCount {                    \
    return NSUIntegerMax;                       \
  }

namespace {

// The UTF-8 of literals that have none of their own (UTF-16 constant strings, tagged pointers), made once per
// literal and kept for the life of the process, as the literal is.
struct LiteralTexts {
  std::mutex lock;
  std::unordered_map<uintptr_t, std::string> texts;
};

LiteralTexts& literal_texts() {
  static LiteralTexts* texts = new LiteralTexts;
  return *texts;
}

template <typename Make>
const std::string& literal_text(const void* key, Make make) {
  LiteralTexts& texts = literal_texts();
  std::lock_guard<std::mutex> guard(texts.lock);
  auto found = texts.texts.find(reinterpret_cast<uintptr_t>(key));
  if (found != texts.texts.end()) return found->second;
  return texts.texts.emplace(reinterpret_cast<uintptr_t>(key), make()).first->second;
}

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += char(code);
  } else if (code < 0x800) {
    out += char(0xC0 | (code >> 6));
    out += char(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += char(0xE0 | (code >> 12));
    out += char(0x80 | ((code >> 6) & 0x3F));
    out += char(0x80 | (code & 0x3F));
  } else {
    out += char(0xF0 | (code >> 18));
    out += char(0x80 | ((code >> 12) & 0x3F));
    out += char(0x80 | ((code >> 6) & 0x3F));
    out += char(0x80 | (code & 0x3F));
  }
}

}  // namespace

// The layout is clang's: these ivars follow the isa exactly as in its constant-string objects.
@implementation NSConstantString {
  uint32_t _flags;  // low 2 bits: 0 ASCII, 1 UTF-8, 2 UTF-16
  uint32_t _length;
  uint32_t _size;
  uint32_t _hash;
  const void* _data;
}

SHIMKIT_STATIC_OBJECT

- (const char*)UTF8String {
  if ((_flags & 3) < 2) return static_cast<const char*>(_data);
  return literal_text(self, [self] {
    std::string text;
    const uint16_t* units = static_cast<const uint16_t*>(_data);
    size_t count = _size / 2;
    for (size_t i = 0; i < count; i++) {
      uint32_t code = units[i];
      if (code >= 0xD800 && code < 0xDC00 && i + 1 < count) code = 0x10000 + ((code - 0xD800) << 10) + (units[++i] - 0xDC00);
      append_utf8(text, code);
    }
    return text;
  }).c_str();
}

- (NSUInteger)length {
  if ((_flags & 3) < 2) return _size;
  return std::strlen([self UTF8String]);
}

- (id)copyWithZone:(NSZone*)zone {
  return self;
}

@end

// clang's short literals: up to 8 7-bit characters in the pointer, the first from bit 63 down, 7 bits each, the
// length in bits 3..7 and the tag 4 in bits 0..2.
@implementation NSTaggedPointerString

+ (void)load {
  objc_registerSmallObjectClass_np(self, 4);
}

SHIMKIT_STATIC_OBJECT

- (NSUInteger)length {
  return ((uintptr_t)self >> 3) & 0x1f;
}

- (unichar)characterAtIndex:(NSUInteger)index {
  NSUInteger length = [self length];
  if (index >= length) raise_range(@"-[NSString characterAtIndex:]", index, length);
  return ((uintptr_t)self >> (57 - 7 * index)) & 0x7f;
}

- (const char*)UTF8String {
  uintptr_t bits = (uintptr_t)self;
  return literal_text(self, [bits] {
    std::string text;
    size_t length = (bits >> 3) & 0x1f;
    for (size_t i = 0; i < length; i++) text += char((bits >> (57 - 7 * i)) & 0x7f);
    return text;
  }).c_str();
}

- (id)copyWithZone:(NSZone*)zone {
  return self;
}

@end
