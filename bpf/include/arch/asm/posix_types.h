/* The generic kernel types: BPF has no legacy ones of its own. */
#ifndef SLUICE_ASM_POSIX_TYPES_H
#define SLUICE_ASM_POSIX_TYPES_H
#include <asm-generic/posix_types.h>
#endif
