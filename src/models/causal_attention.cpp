#include "models/causal_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"

#ifdef BIGBATCH_WITH_CBLAS
#include <cblas.h>
#endif

namespace bigbatch {

torch::Tensor causal_attention_reference(
    const torch::Tensor& qkv, int64_t heads,
    const std::function<torch::Tensor(const torch::Tensor&)>& dropout) {
  const int64_t batch = qkv.size(0);
  const int64_t length = qkv.size(1);
  const int64_t d = qkv.size(2) / 3;
  const int64_t head_dim = d / heads;
  const auto parts = qkv.chunk(3, /*dim=*/-1);
  auto split_heads = [&](const torch::Tensor& t) {
    return t.view({batch, length, heads, head_dim}).transpose(1, 2);  // [B, H, T, hd]
  };
  // The 1/sqrt(hd) scale on q ([B, H, T, hd]) rather than on the scores ([B, H, T, T]).
  const auto q = split_heads(parts[0]) * (1.0 / std::sqrt(double(head_dim)));
  const auto k = split_heads(parts[1]);
  const auto v = split_heads(parts[2]);
  // Which key positions each query may not see: the future. Padding sits at the end of a row,
  // so no real position ever attends to it.
  const auto future =
      torch::ones({length, length}, qkv.options().dtype(torch::kBool)).triu(/*diagonal=*/1);
  // In place: matmul's backward needs its inputs, not its output.
  auto scores = torch::matmul(q, k.transpose(-2, -1))
                    .masked_fill_(future, -std::numeric_limits<double>::infinity());
  auto attention = torch::softmax(scores, /*dim=*/-1);
  if (dropout)
    attention = dropout(attention);
  return torch::matmul(attention, v).transpose(1, 2).reshape({batch, length, d});
}

namespace {

// Score rows and key columns go in blocks of this many positions: a block wholly above the
// diagonal is skipped, and 64-row products still run near the GEMM kernels' speed.
constexpr int64_t kBlock = 64;

// Row-major C[m, n] = alpha op(A) op(B) + beta C, op(A) being [m, k], on the calling thread
// (inside a parallel region the BLAS starts no threads of its own). Through CBLAS a call costs
// about a microsecond; through libtorch's matrix product on views of the same memory, which
// serves where CBLAS is not found, about ten.
template <typename scalar_t>
void gemm_through_torch(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, scalar_t alpha,
                        const scalar_t* a, int64_t lda, const scalar_t* b, int64_t ldb,
                        scalar_t beta, scalar_t* c, int64_t ldc) {
  const auto options = torch::TensorOptions().dtype(c10::CppTypeToScalarType<scalar_t>::value);
  const auto view = [&](const scalar_t* data, int64_t rows, int64_t cols, int64_t ld,
                        bool transposed) {
    auto* pointer = const_cast<scalar_t*>(data);
    return transposed ? torch::from_blob(pointer, {cols, rows}, {ld, 1}, options).t()
                      : torch::from_blob(pointer, {rows, cols}, {ld, 1}, options);
  };
  torch::Tensor out = torch::from_blob(c, {m, n}, {ldc, 1}, options);
  out.addmm_(view(a, m, k, lda, trans_a), view(b, k, n, ldb, trans_b), beta, alpha);
}

template <typename scalar_t>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, scalar_t alpha,
          const scalar_t* a, int64_t lda, const scalar_t* b, int64_t ldb, scalar_t beta,
          scalar_t* c, int64_t ldc) {
#ifdef BIGBATCH_WITH_CBLAS
  const CBLAS_TRANSPOSE op_a = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE op_b = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<scalar_t, float>) {
    cblas_sgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb),
                beta, c, int(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb),
                beta, c, int(ldc));
  }
#else
  gemm_through_torch(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

// The three causal products of a head, block by block (kBlock positions), computing only what
// lies on or below the diagonal of the [T, T] matrix involved (row-major, rows t apart).
template <typename Body>
void for_each_block(int64_t t, const Body& body) {
  for (int64_t first = 0; first < t; first += kBlock)
    body(first, std::min(t, first + kBlock));
}

// c [T, T] = alpha a b^T on and below the diagonal (a, b: [T, k], rows lda, ldb apart), and
// `above` everywhere above it.
template <typename scalar_t>
void causal_outer(int64_t t, int64_t k, scalar_t alpha, const scalar_t* a, int64_t lda,
                  const scalar_t* b, int64_t ldb, scalar_t above, scalar_t* c) {
  for_each_block(t, [&](int64_t r0, int64_t r1) {
    gemm(false, true, r1 - r0, r1, k, alpha, a + r0 * lda, lda, b, ldb, scalar_t(0), c + r0 * t, t);
  });
  for (int64_t i = 0; i + 1 < t; ++i)
    std::fill(c + i * t + i + 1, c + (i + 1) * t, above);
}

// c [T, n] = alpha m b for a lower-triangular m [T, T] (b: [T, n]; rows ldb, ldc apart).
template <typename scalar_t>
void causal_times(int64_t t, int64_t n, scalar_t alpha, const scalar_t* m, const scalar_t* b,
                  int64_t ldb, scalar_t* c, int64_t ldc) {
  for_each_block(t, [&](int64_t r0, int64_t r1) {
    gemm(false, false, r1 - r0, n, r1, alpha, m + r0 * t, t, b, ldb, scalar_t(0), c + r0 * ldc,
         ldc);
  });
}

// c [T, n] = alpha m^T b for a lower-triangular m [T, T]: key block j gathers rows i >= j.
template <typename scalar_t>
void causal_transposed_times(int64_t t, int64_t n, scalar_t alpha, const scalar_t* m,
                             const scalar_t* b, int64_t ldb, scalar_t* c, int64_t ldc) {
  for_each_block(t, [&](int64_t c0, int64_t c1) {
    gemm(true, false, c1 - c0, n, t - c0, alpha, m + c0 * t + c0, t, b + c0 * ldb, ldb, scalar_t(0),
         c + c0 * ldc, ldc);
  });
}

// Where one head's matrices lie. q, k and v rows are 3d apart (the projection's layout); the
// output and its gradient rows d apart; a head's probabilities are [T, T].
struct HeadLayout {
  int64_t batch, length, d, heads, head_dim;

  int64_t qkv_row() const { return 3 * d; }
  double scale() const { return 1.0 / std::sqrt(double(head_dim)); }
  // Offsets of head `bh` (= b x heads + h) in the projection, the output and the probabilities.
  int64_t qkv_offset(int64_t bh) const {
    return (bh / heads) * length * 3 * d + (bh % heads) * head_dim;
  }
  int64_t out_offset(int64_t bh) const {
    return (bh / heads) * length * d + (bh % heads) * head_dim;
  }
  int64_t probs_offset(int64_t bh) const { return bh * length * length; }
};

HeadLayout layout_of(const torch::Tensor& qkv, int64_t heads) {
  const int64_t d = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), d, heads, d / heads};
}

// Heads in parallel, one thread each, in one parallel region per call: a head's products are
// too small to split well between threads, and its [T, T] matrices stay in the core's cache
// from the first product to the last. `body(bh, scratch)` gets a [T, T] buffer of its thread.
template <typename Body>
void for_each_head(const HeadLayout& l, const torch::TensorOptions& options, const Body& body) {
  // The threads' buffers are allocated here, by the calling thread: allocated by each OpenMP
  // thread they came from that thread's malloc arena, and a run's resident memory grew with
  // every change of T (1.76 against 1.30 GB after 2 epochs of the README's example on 3000
  // documents).
  const torch::Tensor scratch = torch::empty({at::get_num_threads(), l.length, l.length}, options);
  at::parallel_for(0, l.batch * l.heads, /*grain_size=*/1, [&](int64_t begin, int64_t end) {
    torch::Tensor own = scratch[at::get_thread_num()];
    for (int64_t bh = begin; bh < end; ++bh)
      body(bh, own);
  });
}

// The [T, T] matrix at `data` as a tensor (no copy), for libtorch's softmax kernels.
template <typename scalar_t>
torch::Tensor square_view(scalar_t* data, int64_t t) {
  return torch::from_blob(data, {t, t},
                          torch::TensorOptions().dtype(c10::CppTypeToScalarType<scalar_t>::value));
}

// For each head: p = softmax(scale q k^T over keys <= query) (0 above the diagonal), then
// out_i = sum_{j <= i} p_ij v_j. Products only on and below the diagonal.
template <typename scalar_t>
void attention_forward(const HeadLayout& l, const scalar_t* qkv, scalar_t* probs, scalar_t* out,
                       const torch::TensorOptions& options) {
  const int64_t t = l.length;
  const int64_t row = l.qkv_row();
  const auto scale = scalar_t(l.scale());
  for_each_head(l, options, [&](int64_t bh, torch::Tensor& scores) {
    const scalar_t* q = qkv + l.qkv_offset(bh);
    const scalar_t* k = q + l.d;
    const scalar_t* v = q + 2 * l.d;
    scalar_t* p = probs + l.probs_offset(bh);
    // The future: -inf, which softmax turns into exactly 0.
    causal_outer(t, l.head_dim, scale, q, row, k, row, -std::numeric_limits<scalar_t>::infinity(),
                 scores.data_ptr<scalar_t>());
    torch::Tensor p_view = square_view(p, t);
    torch::_softmax_out(p_view, scores, /*dim=*/-1, /*half_to_float=*/false);
    causal_times(t, l.head_dim, scalar_t(1), p, v, row, out + l.out_offset(bh), l.d);
  });
}

// For each head, from the output's gradient g:
//   dv_j = sum_{i >= j} p_ij g_i;  dp_ij = g_i . v_j (j <= i; 0 above, where p is 0);
//   ds = softmax's backward of dp;  dq_i = scale sum_{j <= i} ds_ij k_j;
//   dk_j = scale sum_{i >= j} ds_ij q_i.
template <typename scalar_t>
void attention_backward(const HeadLayout& l, const scalar_t* qkv, const scalar_t* probs,
                        const scalar_t* grad_out, scalar_t* grad_qkv,
                        const torch::TensorOptions& options) {
  const int64_t t = l.length;
  const int64_t row = l.qkv_row();
  const auto scale = scalar_t(l.scale());
  for_each_head(l, options, [&](int64_t bh, torch::Tensor& grad_probs) {
    const scalar_t* q = qkv + l.qkv_offset(bh);
    const scalar_t* k = q + l.d;
    const scalar_t* v = q + 2 * l.d;
    const scalar_t* p = probs + l.probs_offset(bh);
    const scalar_t* g = grad_out + l.out_offset(bh);
    scalar_t* dq = grad_qkv + l.qkv_offset(bh);
    scalar_t* dp = grad_probs.data_ptr<scalar_t>();
    causal_transposed_times(t, l.head_dim, scalar_t(1), p, g, l.d, dq + 2 * l.d, row);
    causal_outer(t, l.head_dim, scalar_t(1), g, l.d, v, row, scalar_t(0), dp);
    // In place: each element of the result needs only its own dp and p and the row's sum.
    const torch::Tensor p_view = square_view(const_cast<scalar_t*>(p), t);
    torch::_softmax_backward_data_out(grad_probs, grad_probs, p_view, /*dim=*/-1,
                                      p_view.scalar_type());
    const scalar_t* ds = dp;
    causal_times(t, l.head_dim, scale, ds, k, row, dq, row);
    causal_transposed_times(t, l.head_dim, scale, ds, q, row, dq + l.d, row);
  });
}

class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv,
                               int64_t heads) {
    const HeadLayout l = layout_of(qkv, heads);
    // What backward needs of the forward, as the reference keeps it: the probabilities.
    torch::Tensor probs = torch::empty({l.batch, l.heads, l.length, l.length}, qkv.options());
    torch::Tensor out = torch::empty({l.batch, l.length, l.d}, qkv.options());
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "causal_attention_forward", [&] {
      attention_forward(l, qkv.data_ptr<scalar_t>(), probs.data_ptr<scalar_t>(),
                        out.data_ptr<scalar_t>(), qkv.options());
    });
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["heads"] = heads;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& qkv = saved[0];
    const torch::Tensor& probs = saved[1];
    const HeadLayout l = layout_of(qkv, ctx->saved_data["heads"].toInt());
    const torch::Tensor grad_out = grad_outputs[0].contiguous();
    // Every element is written: dq by row blocks, dk and dv by column blocks covering all.
    torch::Tensor grad_qkv = torch::empty_like(qkv);
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "causal_attention_backward", [&] {
      attention_backward(l, qkv.data_ptr<scalar_t>(), probs.data_ptr<scalar_t>(),
                         grad_out.data_ptr<scalar_t>(), grad_qkv.data_ptr<scalar_t>(),
                         qkv.options());
    });
    return {grad_qkv, torch::Tensor()};
  }
};

}  // namespace

bool fusable_attention(const torch::Tensor& qkv) {
  return qkv.device().is_cpu() && qkv.layout() == torch::kStrided && qkv.dim() == 3 &&
         (qkv.scalar_type() == torch::kFloat || qkv.scalar_type() == torch::kDouble) &&
         qkv.is_contiguous();
}

torch::Tensor causal_attention_cpu(const torch::Tensor& qkv, int64_t heads) {
  BB_INTERNAL_ASSERT(fusable_attention(qkv),
                     "the CPU attention kernel got an input it does not take");
  BB_INTERNAL_ASSERT(qkv.size(2) % (3 * heads) == 0, "q, k and v must divide into the heads");
  return CausalAttentionFunction::apply(qkv, heads);
}

torch::Tensor causal_attention(const torch::Tensor& qkv, int64_t heads, bool dropout_due,
                               const std::function<torch::Tensor(const torch::Tensor&)>& dropout) {
  if (!dropout_due && fusable_attention(qkv))
    return causal_attention_cpu(qkv, heads);
  return causal_attention_reference(qkv, heads, dropout_due ? dropout : nullptr);
}

}  // namespace bigbatch
