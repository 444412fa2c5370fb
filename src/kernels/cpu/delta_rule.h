// The recurrent gated delta rule on one head's f32 state S [Dk, Dv] (row-major), the token
// step of Gated DeltaNet (decode, speculative verify, recurrent prefill):
//   S <- decay S;  delta = beta (v - S^T k);  S <- S + k delta^T;  out = S^T q
// computed in two passes over S instead of four:
//   gather (old S):  kv = S^T k and qs = S^T q together (each S row read once, two FMAs)
//                    delta = beta (v - decay kv);  out = decay qs + (k . q) delta
//   update:          S = decay S + k delta^T
// (out = (decay S + k delta^T)^T q expanded, as the chunked form computes its output.) A run
// of tokens fuses one token's update with the next token's gather: one pass over S per token.
// Each column of S evolves on its own (delta_j and out_j read only column j), so a run can
// also walk S strip by strip.
// Deterministic: every column's sums run over Dk in order, one FMA (AVX2) or multiply-add
// (scalar reference) per step, whatever Dv is and whether or not the passes are fused, so
// delta_rule_run over n tokens is bit-identical to n delta_rule_steps. The AVX2 and NEON paths
// and the reference differ only by that rounding (NEON runs two passes a token, unfused).
#pragma once
#include <cstdint>

namespace zen::kernels {

// One token's operands. q, k: [Dk]; v, out: [Dv]; delta: [Dv], written by the gather and read
// by the update.
struct DeltaRuleToken {
  const float* q;
  const float* k;
  const float* v;
  float decay;  // exp(g), in (0, 1]
  float beta;
  float* out;
  float* delta;
};

// The two passes, and the update of `prev` fused with the gather of `next`.
void delta_rule_gather_f32(const float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t);
void delta_rule_update_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t);
void delta_rule_update_gather_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& prev,
                                  const DeltaRuleToken& next);

// One token: gather, then update.
void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t);

// n tokens in order (tokens[t].delta of consecutive tokens must differ; two buffers can
// alternate). Column strips of S are independent under the delta rule, so the AVX2 path runs
// all n tokens over one strip of up to 24 columns at a time, copied into a contiguous buffer
// that stays in L1, with each update fused with the next gather: bit-identical to n steps.
void delta_rule_run_f32(float* S, int64_t dk, int64_t dv, int64_t n, const DeltaRuleToken* tokens);

namespace ref {
void delta_rule_gather_f32(const float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t);
void delta_rule_update_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t);
void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t);
}  // namespace ref

}  // namespace zen::kernels
