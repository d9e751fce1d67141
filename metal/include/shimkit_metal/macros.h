// The predefined macros of the Metal compiler and <metal_stdlib>'s constants. The front end preprocesses
// kernels with these (and nothing else) defined, as Apple's compiler would see them.
#pragma once

#define __METAL__ 1
#define __METAL_VERSION__ 310
#define __HAVE_BFLOAT__ 1
#define M_PI_F 3.14159265358979323846f
#define M_PI_H 3.14159265358979323846f
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LN2_F 0.693147180559945309417f
#define M_SQRT2_F 1.41421356237309504880f
#define MAXFLOAT 3.402823466e+38f
#define MAXHALF 65504.0f
#define FLT_MAX 3.402823466e+38f
#define FLT_MIN 0x1.0p-126f
#define FLT_EPSILON 0x1.0p-23f
#define HUGE_VALF __builtin_huge_valf()

#ifndef NAN
#define NAN __builtin_nanf("")
#endif
#ifndef INFINITY
#define INFINITY __builtin_inff()
#endif
