#pragma once
#include <Foundation/NSObject.h>

@class NSArray<__covariant ObjectType>;

typedef struct {
  unsigned long state;
  id __unsafe_unretained* itemsPtr;
  unsigned long* mutationsPtr;
  unsigned long extra[5];
} NSFastEnumerationState;

// What `for (id x in collection)` calls.
@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(id __unsafe_unretained[])buffer
                                    count:(NSUInteger)len;
@end

@interface NSEnumerator<__covariant ObjectType> : NSObject <NSFastEnumeration>
- (ObjectType)nextObject;
@property(readonly, copy) NSArray<ObjectType>* allObjects;
@end
