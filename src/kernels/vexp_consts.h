/* Constants of the vector exp shared by every ISA version (see
 * x86/vexp_avx512.h for the method). Polynomial: Cephes expf.c (S. Moshier),
 * e^r ~ 1 + r + r^2 (P0 + P1 r + ... + P5 r^5) on |r| <= ln2/2. */
#ifndef PAGODA_KERNELS_VEXP_CONSTS_H
#define PAGODA_KERNELS_VEXP_CONSTS_H

#define PG_VEXP_HI 89.0f     /* above ln(FLT_MAX) = 88.72: the result is +inf */
#define PG_VEXP_LO (-104.0f) /* below ln(2^-150) = -103.97: the result is 0 */
#define PG_VEXP_LOG2E 1.44269504088896341f
#define PG_VEXP_LN2_HI 0.693359375f /* 9 significant bits: n * LN2_HI is exact */
#define PG_VEXP_LN2_LO (-2.12194440e-4f)
#define PG_VEXP_P0 5.0000001201e-1f
#define PG_VEXP_P1 1.6666665459e-1f
#define PG_VEXP_P2 4.1665795894e-2f
#define PG_VEXP_P3 8.3334519073e-3f
#define PG_VEXP_P4 1.3981999507e-3f
#define PG_VEXP_P5 1.9875691500e-4f

#endif
