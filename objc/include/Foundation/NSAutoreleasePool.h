#pragma once
#include <Foundation/NSObject.h>

// The object form of @autoreleasepool (objc_autoreleasePoolPush/Pop): pools nest per thread, and draining one
// drains those pushed after it.
@interface NSAutoreleasePool : NSObject
+ (void)addObject:(id)object;
- (void)addObject:(id)object;
- (void)drain;
@end
