// The CPU implementations of the custom ops `native_engine::decode_attention` and `native_engine::moe_experts`
// (schemas defined in Python by engine_adapters.native.decode.c_kernels), so that a compiled decode graph reaches the C
// kernels through the dispatcher without entering Python.
//
// The kernels themselves (decode_attention.c, moe_experts.c) are compiled once per shape (-DHEAD_DIM/-DGROUP,
// -DHIDDEN/-DINTER) into libraries of their own; Python registers each built kernel's entry point here
// (`native_engine_register_kernel`) before any op call needs it. An op validates its tensors first (ValueError
// with what it got), then looks its kernel up by shape; a shape with no registered kernel is an error too.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using AttentionFn = int64_t (*)(const float*, const float*, const float*, const float*, const float*,
                                const int64_t*, const int64_t*, int64_t, int64_t, int64_t, int64_t, float, float*,
                                int64_t);
using ExpertsFn = int64_t (*)(const float*, const float*, const int64_t*, const float*, const float*, const float*,
                              int64_t, int64_t, int64_t, float*, int64_t);

constexpr int64_t kAttention = 0;
constexpr int64_t kExperts = 1;

// (kind, shape key a, shape key b) -> entry point; written rarely (a new shape), read on every op call.
std::mutex registry_lock;
std::map<std::tuple<int64_t, int64_t, int64_t>, void*> registry;

void* find_kernel(int64_t kind, int64_t a, int64_t b) {
    std::lock_guard<std::mutex> guard(registry_lock);
    auto found = registry.find({kind, a, b});
    return found == registry.end() ? nullptr : found->second;
}

std::string shape_of(const at::Tensor& t) {
    std::ostringstream out;
    out << "(";
    for (int64_t i = 0; i < t.dim(); i++) out << (i ? ", " : "") << t.size(i);
    out << (t.dim() == 1 ? ",)" : ")");
    return out.str();
}

std::string dtype_name(c10::ScalarType type) {
    switch (type) {
        case c10::ScalarType::Float: return "torch.float32";
        case c10::ScalarType::Double: return "torch.float64";
        case c10::ScalarType::Half: return "torch.float16";
        case c10::ScalarType::BFloat16: return "torch.bfloat16";
        case c10::ScalarType::Long: return "torch.int64";
        case c10::ScalarType::Int: return "torch.int32";
        default: return std::string("torch.") + c10::toString(type);
    }
}

// Raises ValueError unless `t` is a contiguous `dims`-d CPU tensor of `type` (what a kernel reads by pointer).
void check_tensor(const char* op, const char* name, const at::Tensor& t, c10::ScalarType type, int64_t dims) {
    bool ok = t.scalar_type() == type && t.dim() == dims && t.is_contiguous() && t.device().is_cpu();
    TORCH_CHECK_VALUE(ok, op, ": ", name, " got ", dtype_name(t.scalar_type()), " ", shape_of(t),
                      " contiguous=", t.is_contiguous() ? "True" : "False", " on ", t.device().str(),
                      ", expected a contiguous ", dims, "-d ", dtype_name(type), " CPU tensor");
}

void check_threads(const char* op, int64_t threads) {
    TORCH_CHECK_VALUE(threads >= 1, op, ": threads got ", threads, ", expected >= 1");
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_new, const at::Tensor& v_new,
                            const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& slot_ids,
                            const at::Tensor& positions, double scale, int64_t threads) {
    const char* op = "decode_attention";
    const auto f32 = c10::ScalarType::Float, i64 = c10::ScalarType::Long;
    check_tensor(op, "q", q, f32, 3);
    check_tensor(op, "k_new", k_new, f32, 3);
    check_tensor(op, "v_new", v_new, f32, 3);
    check_tensor(op, "key_cache", key_cache, f32, 4);
    check_tensor(op, "value_cache", value_cache, f32, 4);
    check_tensor(op, "slot_ids", slot_ids, i64, 1);
    check_tensor(op, "positions", positions, i64, 1);
    check_threads(op, threads);
    const int64_t rows = q.size(0), heads = q.size(1), head_dim = q.size(2);
    const int64_t num_slots = key_cache.size(0), kv_heads = key_cache.size(1), max_len = key_cache.size(2);
    const std::vector<int64_t> own{rows, kv_heads, head_dim};
    bool shapes_ok = k_new.sizes().vec() == own && v_new.sizes().vec() == own &&
                     value_cache.sizes() == key_cache.sizes() && key_cache.size(3) == head_dim &&
                     slot_ids.size(0) == rows && positions.size(0) == rows && kv_heads > 0 && heads % kv_heads == 0;
    TORCH_CHECK_VALUE(shapes_ok, op, ": got q ", shape_of(q), ", k_new ", shape_of(k_new), ", v_new ",
                      shape_of(v_new), ", caches ", shape_of(key_cache), " / ", shape_of(value_cache), ", slot_ids ",
                      shape_of(slot_ids), ", positions ", shape_of(positions),
                      "; expected q [S, H, D], k_new and v_new [S, KVH, D], caches [slots, KVH, max_len, D], "
                      "slot_ids and positions [S], H a multiple of KVH");
    const int64_t group = heads / kv_heads;
    auto kernel = reinterpret_cast<AttentionFn>(find_kernel(kAttention, head_dim, group));
    TORCH_CHECK(kernel != nullptr, op, ": no kernel built for HEAD_DIM=", head_dim, ", GROUP=", group,
                " (engine_adapters.native.decode.attention_kernel.build builds and registers one)");
    at::Tensor out = at::empty({rows, heads * head_dim}, q.options());
    int64_t status = kernel(q.data_ptr<float>(), k_new.data_ptr<float>(), v_new.data_ptr<float>(),
                            key_cache.data_ptr<float>(), value_cache.data_ptr<float>(), slot_ids.data_ptr<int64_t>(),
                            positions.data_ptr<int64_t>(), rows, num_slots, kv_heads, max_len,
                            static_cast<float>(scale), out.data_ptr<float>(), threads);
    TORCH_CHECK(status >= 0, op, ": could not allocate ", group * (max_len + 1), " scratch floats");
    if (status > 0) {
        const int64_t r = status - 1;
        TORCH_CHECK_VALUE(false, op, ": row ", r, " got slot ", slot_ids.data_ptr<int64_t>()[r], " and ",
                          positions.data_ptr<int64_t>()[r], " cached positions, expected a slot in [0, ", num_slots,
                          ") and fewer than ", max_len, " positions");
    }
    return out;
}

at::Tensor moe_experts(const at::Tensor& x, const at::Tensor& h, const at::Tensor& ids, const at::Tensor& weights,
                       const at::Tensor& gate_up, const at::Tensor& down, int64_t threads) {
    const char* op = "moe_experts";
    const auto f32 = c10::ScalarType::Float;
    check_tensor(op, "x", x, f32, 2);
    check_tensor(op, "h", h, f32, 2);
    check_tensor(op, "ids", ids, c10::ScalarType::Long, 2);
    check_tensor(op, "weights", weights, f32, 2);
    check_tensor(op, "gate_up", gate_up, f32, 3);
    check_tensor(op, "down", down, f32, 3);
    check_threads(op, threads);
    const int64_t rows = x.size(0), hidden = x.size(1), experts = down.size(0), inter = down.size(1);
    const int64_t top_k = ids.size(1);
    bool shapes_ok = h.sizes() == x.sizes() && weights.size(0) == rows && weights.size(1) == top_k &&
                     gate_up.sizes().vec() == std::vector<int64_t>{experts, hidden, 2 * inter} &&
                     down.size(2) == hidden && ids.size(0) == rows;
    TORCH_CHECK_VALUE(shapes_ok, op, ": got x ", shape_of(x), ", h ", shape_of(h), ", ids ", shape_of(ids),
                      ", weights ", shape_of(weights), ", gate_up ", shape_of(gate_up), ", down ", shape_of(down),
                      "; expected x and h [S, hidden], ids and weights [S, K], gate_up [E, hidden, 2I], "
                      "down [E, I, hidden]");
    auto kernel = reinterpret_cast<ExpertsFn>(find_kernel(kExperts, hidden, inter));
    TORCH_CHECK(kernel != nullptr, op, ": no kernel built for HIDDEN=", hidden, ", INTER=", inter,
                " (engine_adapters.native.decode.expert_kernel.build builds and registers one)");
    at::Tensor out = at::empty(x.sizes(), x.options());
    int64_t status = kernel(x.data_ptr<float>(), h.data_ptr<float>(), ids.data_ptr<int64_t>(),
                            weights.data_ptr<float>(), gate_up.data_ptr<float>(), down.data_ptr<float>(), rows, top_k,
                            experts, out.data_ptr<float>(), threads);
    TORCH_CHECK(status >= 0, op, ": could not allocate scratch memory for ", rows, " rows x ", top_k, " experts");
    if (status > 0) {
        const int64_t row = status - 1;
        std::ostringstream got;
        got << "[";
        for (int64_t k = 0; k < top_k; k++) got << (k ? ", " : "") << ids.data_ptr<int64_t>()[row * top_k + k];
        got << "]";
        TORCH_CHECK_VALUE(false, op, ": row ", row, " got expert ids ", got.str(), ", expected ids in [0, ", experts,
                          ")");
    }
    return out;
}

}  // namespace

// Registers a built kernel's entry point under its shape key: kind 0 = decode_attention (HEAD_DIM, GROUP), kind 1 =
// moe_experts (HIDDEN, INTER). Re-registering a key replaces its entry (the same source and flags build the same
// kernel). Returns 0, or -1 for an unknown kind.
extern "C" int64_t native_engine_register_kernel(int64_t kind, int64_t a, int64_t b, void* entry) {
    if (kind != kAttention && kind != kExperts) return -1;
    std::lock_guard<std::mutex> guard(registry_lock);
    registry[{kind, a, b}] = entry;
    return 0;
}

TORCH_LIBRARY_IMPL(native_engine, CPU, m) {
    m.impl("decode_attention", &decode_attention);
    m.impl("moe_experts", &moe_experts);
}
