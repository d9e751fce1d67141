#pragma once
#include <Foundation/NSObject.h>
#include <Foundation/NSRange.h>

@interface NSData : NSObject <NSCopying, NSMutableCopying>
+ (instancetype)data;
+ (instancetype)dataWithBytes:(const void*)bytes length:(NSUInteger)length;
// Takes the bytes without copying; they are free()d with the object when freeWhenDone (the default).
+ (instancetype)dataWithBytesNoCopy:(void*)bytes length:(NSUInteger)length;
+ (instancetype)dataWithBytesNoCopy:(void*)bytes length:(NSUInteger)length freeWhenDone:(BOOL)freeWhenDone;
+ (instancetype)dataWithData:(NSData*)data;
- (instancetype)initWithBytes:(const void*)bytes length:(NSUInteger)length;
- (instancetype)initWithBytesNoCopy:(void*)bytes length:(NSUInteger)length freeWhenDone:(BOOL)freeWhenDone;
- (instancetype)initWithBytesNoCopy:(void*)bytes length:(NSUInteger)length
                        deallocator:(void (^)(void* bytes, NSUInteger length))deallocator;
- (instancetype)initWithData:(NSData*)data;
@property(readonly) const void* bytes NS_RETURNS_INNER_POINTER;
@property(readonly) NSUInteger length;
- (void)getBytes:(void*)buffer length:(NSUInteger)length;
- (void)getBytes:(void*)buffer range:(NSRange)range;
- (BOOL)isEqualToData:(NSData*)other;
@end

@interface NSMutableData : NSData
+ (instancetype)dataWithCapacity:(NSUInteger)capacity;
+ (instancetype)dataWithLength:(NSUInteger)length;
- (instancetype)initWithCapacity:(NSUInteger)capacity;
- (instancetype)initWithLength:(NSUInteger)length;
@property(readonly) void* mutableBytes NS_RETURNS_INNER_POINTER;
@property NSUInteger length;
- (void)appendBytes:(const void*)bytes length:(NSUInteger)length;
- (void)appendData:(NSData*)other;
- (void)increaseLengthBy:(NSUInteger)extraLength;
- (void)replaceBytesInRange:(NSRange)range withBytes:(const void*)bytes;
@end
