#pragma once
#include <Foundation/NSObjCRuntime.h>
// Zones are ignored: every allocation comes from malloc, as on Apple since ARC.
FOUNDATION_EXPORT NSZone* NSDefaultMallocZone(void);
