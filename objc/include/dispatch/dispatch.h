// A synchronous stand-in for Grand Central Dispatch: every block runs on the calling thread, under the queue's
// mutex, before the call returns (dispatch_async included), so a serial queue still runs one block at a time.
// Queues are reference counted with dispatch_retain/dispatch_release (they are not Objective-C objects here).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DISPATCH_EXPORT extern "C" __attribute__((visibility("default")))
#else
#define DISPATCH_EXPORT extern __attribute__((visibility("default")))
#endif

typedef struct shimkit_dispatch_queue_s* dispatch_queue_t;
typedef struct shimkit_dispatch_queue_attr_s* dispatch_queue_attr_t;
typedef void* dispatch_object_t;
typedef void (^dispatch_block_t)(void);
typedef void (*dispatch_function_t)(void*);
typedef uint64_t dispatch_time_t;
typedef long dispatch_queue_priority_t;

#define DISPATCH_QUEUE_SERIAL ((dispatch_queue_attr_t)0)
#define DISPATCH_QUEUE_CONCURRENT ((dispatch_queue_attr_t)1)
#define DISPATCH_QUEUE_PRIORITY_HIGH 2
#define DISPATCH_QUEUE_PRIORITY_DEFAULT 0
#define DISPATCH_QUEUE_PRIORITY_LOW (-2)
#define DISPATCH_TIME_NOW ((dispatch_time_t)0)
#define DISPATCH_TIME_FOREVER (~(dispatch_time_t)0)

DISPATCH_EXPORT dispatch_queue_t dispatch_queue_create(const char* label, dispatch_queue_attr_t attr);
DISPATCH_EXPORT dispatch_queue_t dispatch_get_main_queue(void);
DISPATCH_EXPORT dispatch_queue_t dispatch_get_global_queue(long identifier, unsigned long flags);
DISPATCH_EXPORT const char* dispatch_queue_get_label(dispatch_queue_t queue);
DISPATCH_EXPORT void dispatch_retain(void* object);
DISPATCH_EXPORT void dispatch_release(void* object);
DISPATCH_EXPORT void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block);
DISPATCH_EXPORT void dispatch_async(dispatch_queue_t queue, dispatch_block_t block);
DISPATCH_EXPORT void dispatch_barrier_sync(dispatch_queue_t queue, dispatch_block_t block);
DISPATCH_EXPORT void dispatch_sync_f(dispatch_queue_t queue, void* context, dispatch_function_t work);
DISPATCH_EXPORT void dispatch_async_f(dispatch_queue_t queue, void* context, dispatch_function_t work);
DISPATCH_EXPORT void dispatch_once_f(long* predicate, void* context, dispatch_function_t function);
typedef long dispatch_once_t;
DISPATCH_EXPORT void dispatch_once(dispatch_once_t* predicate, dispatch_block_t block);
