/* The BPF target's <asm/types.h>: the generic integer types. sluice's
 * programs are built for BPF, not for the host's architecture, so their
 * arch headers are these few, the same on every build host (an amd64 or
 * arm64 Debian ships its own under /usr/include/<triplet>/asm, which the
 * build no longer reads). */
#ifndef SLUICE_ASM_TYPES_H
#define SLUICE_ASM_TYPES_H
#include <asm-generic/types.h>
#endif
