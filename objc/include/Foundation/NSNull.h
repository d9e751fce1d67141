#pragma once
#include <Foundation/NSObject.h>

// The one object that stands for nil in collections.
@interface NSNull : NSObject <NSCopying>
+ (NSNull*)null;
@end
