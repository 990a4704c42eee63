/* The target's byte order: bpfel (the programs sluice loads) is little
 * endian; bpfeb would take the other. */
#ifndef SLUICE_ASM_BYTEORDER_H
#define SLUICE_ASM_BYTEORDER_H
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#include <linux/byteorder/little_endian.h>
#else
#include <linux/byteorder/big_endian.h>
#endif
#endif
