// What Foundation's implementation shares between its files, and the runtime functions it alone calls.
#pragma once

#import <Foundation/Foundation.h>

#include <string>

extern "C" {
void objc_shimkit_retain(id object);
BOOL objc_shimkit_release(id object);
size_t objc_shimkit_retain_count(id object);
void objc_shimkit_autorelease_add(id object);
id objc_shimkit_current_exception(void);
BOOL objc_registerSmallObjectClass_np(Class cls, uintptr_t tag);
void objc_setEnumerationMutationHandler(void (*handler)(id));
}

// printf's formatting with %@ (an object's -description, "(null)" for nil), into UTF-8.
std::string shimkit_format(NSString* format, va_list args);

// The UTF-8 of any NSString (or of an object's -description).
const char* shimkit_utf8(id object);

// An autoreleased NSString of the given UTF-8 bytes.
NSString* shimkit_string(const char* bytes, size_t length);
inline NSString* shimkit_string(const std::string& text) { return shimkit_string(text.data(), text.size()); }

// FNV-1a over bytes: NSString's -hash, so that equal strings of different classes hash alike.
NSUInteger shimkit_hash_bytes(const void* bytes, size_t length);
