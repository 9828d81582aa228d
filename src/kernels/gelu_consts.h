/* Constants of the vector GELU shared by every ISA version (x86/ops_avx2.c,
 * x86/ops_avx512.c, arm/ops_neon.c; spec pg_ref_gelu in ref/ops_ref.h).
 *
 * GELU(x) = 0.5 x (1 + erf(z)), z = x / sqrt(2), with the two-interval
 * erff of ARM's optimized-routines (math/erff.c, erff_data.c; 1.1 ulp of
 * erf, so 1 + erf(z) is within ~6e-8 absolute, as libm's 1 + erff):
 *   |z| < 0.875:        erf(z) = z + z P(z^2),  P = A0 + A1 z^2 + ... + A5 z^10
 *   0.875 <= |z| < 4:   erf(|z|) = 1 - e,  e = exp(-(a + a Q(a))), a = |z|,
 *                       Q = B0 + B1 a + ... + B6 a^6; so 1 + erf(z) = 2 - e
 *                       for z > 0 and e itself for z < 0
 *   |z| >= 4:           1 + erf(z) = 2 or 0.
 * The exp is the table's vector exp (vexp_consts.h, <= 1 ulp). */
#ifndef PAGODA_KERNELS_GELU_CONSTS_H
#define PAGODA_KERNELS_GELU_CONSTS_H

#define PG_GELU_RSQRT2 0.70710678118654752f
#define PG_GELU_SPLIT 0.875f
#define PG_GELU_BIG 4.0f
#define PG_GELU_A0 0x1.06eba6p-03f
#define PG_GELU_A1 (-0x1.8126e0p-02f)
#define PG_GELU_A2 0x1.ce1a46p-04f
#define PG_GELU_A3 (-0x1.b68bd2p-06f)
#define PG_GELU_A4 0x1.473f48p-08f
#define PG_GELU_A5 (-0x1.3a1a82p-11f)
#define PG_GELU_B0 0x1.079d0cp-3f
#define PG_GELU_B1 0x1.450aa0p-1f
#define PG_GELU_B2 0x1.b55cb0p-4f
#define PG_GELU_B3 (-0x1.8d6300p-6f)
#define PG_GELU_B4 0x1.fd1336p-9f
#define PG_GELU_B5 (-0x1.91d2ccp-12f)
#define PG_GELU_B6 0x1.222900p-16f

#endif
