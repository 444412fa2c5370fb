// One token of the gated delta rule on one head's f32 state S [Dk, Dv] (row-major), the
// recurrent step of Gated DeltaNet (decode, speculative verify, one-token chunks):
//   S <- decay S;  delta = beta (v - S^T k);  S <- S + k delta^T;  out = S^T q
// computed in two passes over S instead of four:
//   pass 1 (old S):  kv = S^T k and qs = S^T q together (each S row read once, two FMAs)
//                    delta = beta (v - decay kv);  out = decay qs + (k . q) delta
//   pass 2:          S = decay S + k delta^T
// (out = (decay S + k delta^T)^T q expanded, as the chunked form computes its output.)
// Deterministic: every column's sums run over Dk in order, one FMA (AVX2) or multiply-add
// (scalar reference) per step, whatever Dv is; the AVX2 path and the reference differ only
// by that rounding.
#pragma once
#include <cstdint>

namespace zen::kernels {

// S: [dk, dv], updated in place; q, k: [dk]; v, out: [dv]; delta: [dv] scratch.
void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const float* q, const float* k, const float* v, float decay,
                         float beta, float* out, float* delta);

namespace ref {
void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const float* q, const float* k, const float* v, float decay,
                         float beta, float* out, float* delta);
}  // namespace ref

}  // namespace zen::kernels
