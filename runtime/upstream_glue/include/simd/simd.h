// The one type of Apple's <simd/simd.h> that upstream's Metal runtime uses (et_metal.h: a kernel argument of three
// uint32 lanes, passed with setBytes). Clang's ext_vector_type gives it Apple's layout: 16 bytes, 16-aligned.
#pragma once

typedef __attribute__((__ext_vector_type__(3))) unsigned int simd_uint3;
