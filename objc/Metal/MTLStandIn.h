// What the stand-in's Metal and MetalPerformanceShaders(Graph) know of each other beyond Apple's API: how MPS work
// joins a command buffer's commands, and how it reaches a buffer's bytes whatever the storage mode.
#pragma once

#import <Metal/Metal.h>

#include <functional>

// Every command buffer of the stand-in conforms, MPSCommandBuffer included. `command` runs when the buffer is
// committed, in encoding order with its other commands; `resources` stay alive until then when the buffer
// retains its references. Raises, as Metal does, while an encoder is open or once the buffer is committed.
@protocol ShimkitCommandRecording <NSObject>
- (void)shimkit_encodeCommand:(std::function<void()>)command retaining:(NSArray*)resources;
@end

// Every buffer of the stand-in conforms: its bytes, also for MTLStorageModePrivate (whose -contents is NULL).
@protocol ShimkitBufferStorage <NSObject>
- (void*)shimkit_bytes;
@end

// The stand-in's buffer behind `buffer`; raises NSInvalidArgumentException for an object of another origin.
id<MTLBuffer, ShimkitBufferStorage> shimkit_buffer_storage(id<MTLBuffer> buffer, const char* role);
