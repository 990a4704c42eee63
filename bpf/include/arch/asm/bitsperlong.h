/* BPF's long is 64 bits wide. */
#ifndef SLUICE_ASM_BITSPERLONG_H
#define SLUICE_ASM_BITSPERLONG_H
#define __BITS_PER_LONG 64
#include <asm-generic/bitsperlong.h>
#endif
