/* No arch byte-swap instructions to name: <linux/swab.h> uses its generic
 * versions (and the programs use bpf_endian.h's builtins). */
#ifndef SLUICE_ASM_SWAB_H
#define SLUICE_ASM_SWAB_H
#endif
