#include "kv/kv_cache.h"

#include "error.h"
#include "plugin/host_api.h"
#include "model/weights.h"

#include <algorithm>

namespace cellm {

namespace {
// Tokens of every pool committed at once: for SmolLM2's f16 cache 5.6 MiB, a few hundred microseconds of page
// zeroing before a step, once every 32 steps of 8 decoding sessions.
constexpr int32_t chunk_tokens = 256;

// The manifest's name of a KV type, for messages.
const char* kv_type_name(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_F32: return "f32";
    case CELLM_TYPE_F16: return "f16";
    case CELLM_TYPE_R4: return "r4";
    case CELLM_TYPE_R3: return "r3";
    default: return "q8";
    }
}

// Kinds 4..7 of a coded cache: K shift, K channel scale, query channel scale, signs.
constexpr int32_t first_constant = 4, n_constants = 4;

// The rotation's signs for runs of d: bit i % 64 of word i / 64 of splitmix64's stream, set meaning -1.
std::vector<float> rotation_signs(int64_t d, uint64_t seed) {
    std::vector<float> signs(static_cast<size_t>(d));
    uint64_t state = seed, word = 0;
    for (int64_t i = 0; i < d; ++i) {
        if (i % 64 == 0) {
            state += 0x9E3779B97F4A7C15ull;
            word = state;
            word = (word ^ (word >> 30)) * 0xBF58476D1CE4E5B9ull;
            word = (word ^ (word >> 27)) * 0x94D049BB133111EBull;
            word ^= word >> 31;
        }
        signs[static_cast<size_t>(i)] = (word >> (i % 64)) & 1 ? -1.0f : 1.0f;
    }
    return signs;
}
}  // namespace

KvCache::KvCache(Backend& backend, const std::vector<cellm_arch_layer_info>& layers, int32_t n_blocks, int32_t block_size,
                 cellm_dtype type)
    : backend_(&backend), layers_(layers), block_size_(block_size), type_(type),
      n_slots_(static_cast<int64_t>(n_blocks) * block_size), pool_(n_blocks, backend.buffer_commit() ? 0 : n_blocks),
      commit_(backend.buffer_commit()), chunk_blocks_(std::max(1, chunk_tokens / block_size)) {
    if (type != CELLM_TYPE_F32 && type != CELLM_TYPE_F16 && type != CELLM_TYPE_I8 && !coded()) {
        throw Error("KV cache type must be F32, F16, I8 (q8), R4 or R3");
    }
    for (size_t il = 0; il < layers_.size(); ++il) {
        const cellm_arch_layer_info& layer = layers_[il];
        if (type == CELLM_TYPE_I8 && layer.kv_dim > 0 && scale_runs(layer) == 0) {
            throw Error("a q8 KV cache needs K/V rows (kv_dim) of whole heads or of a multiple of 32 values; layer " +
                        std::to_string(il) + " of this model has " + std::to_string(layer.kv_dim));
        }
        if (coded() && layer.kv_dim > 0) {
            const int32_t head_dim = layer.n_head_kv > 0 && layer.kv_dim % layer.n_head_kv == 0 ? layer.kv_dim / layer.n_head_kv : 0;
            if (head_dim < 8 || (head_dim & (head_dim - 1)) != 0) {
                throw Error(std::string("an ") + kv_type_name(type) + " KV cache rotates each KV head's row, so it needs "
                            "heads of a power-of-two size of at least 8 that the arch reports; layer " + std::to_string(il) +
                            " of this model has " + (head_dim > 0 ? "heads of " + std::to_string(head_dim) : std::string("none reported")));
            }
        }
    }
    if (!backend.iface().supports_op(backend.handle(), CELLM_OP_KV_STORE, type)) {
        throw Error(std::string("backend '") + backend.name() + "' cannot store the KV cache as " + kv_type_name(type));
    }
    // Every layer's K and V pools, then (I8, coded) every layer's K and V scales, then (coded) the constants.
    // Each pool starts 256-byte aligned,
    // which satisfies every device's storage-buffer offset alignment; page aligned where memory is committed by
    // range, so that giving back a pool's blocks gives back whole pages.
    const uint64_t alignment = commit_ != nullptr ? 4096 : 256;
    const auto aligned = [](uint64_t n, uint64_t to) { return (n + to - 1) / to * to; };
    uint64_t end = 0;
    placements_.resize(layers_.size());
    for (int32_t kind = 0; kind < n_kinds() + (coded() ? n_constants : 0); ++kind) {
        for (size_t il = 0; il < layers_.size(); ++il) {
            if (layers_[il].kv_dim == 0) continue;
            const cellm_tensor_desc t = tensor_shape(layers_[il], kind);
            placements_[il].offset[kind] = end;
            // The constants are never given back, so they need no page of their own.
            end = aligned(end + static_cast<uint64_t>(t.nb[3]) * static_cast<uint64_t>(t.ne[3]), kind < n_kinds() ? alignment : 256);
        }
    }
    buffer_ = DeviceBuffer::allocate(backend, end + 64, CELLM_BUFFER_KV_CACHE);
    if (coded()) {
        for (size_t il = 0; il < layers_.size(); ++il) {
            const cellm_arch_layer_info& layer = layers_[il];
            if (layer.kv_dim == 0) continue;
            const auto layer_index = static_cast<int32_t>(il);
            set_key_transform(layer_index, std::vector<float>(static_cast<size_t>(layer.kv_dim), 0.0f),
                              std::vector<float>(static_cast<size_t>(layer.kv_dim), 1.0f));
            write_constant(layer_index, 7, rotation_signs(layer.kv_dim / layer.n_head_kv, rotation_seed));
        }
    }
    window_released_.assign(static_cast<size_t>(n_blocks), false);
    if (commit_ != nullptr) {
        for (const cellm_arch_layer_info& layer : layers_) {
            if (layer.kv_dim > 0) window_ = std::max(window_, layer.window);
        }
        // A window as wide as the context gives nothing back.
        if (window_ >= n_blocks * block_size) window_ = 0;
    }
    std::vector<cellm_arch_layer_info> windowed;
    for (const cellm_arch_layer_info& layer : layers_) {
        if (layer.window > 0) windowed.push_back(layer);
    }
    window_bytes_per_token_ = bytes_per_token(windowed, type_);
}

int32_t KvCache::scale_runs(const cellm_arch_layer_info& layer) {
    if (layer.n_head_kv > 0 && layer.kv_dim % layer.n_head_kv == 0) return layer.n_head_kv;
    return layer.kv_dim % 32 == 0 ? layer.kv_dim / 32 : 0;
}

uint64_t KvCache::bytes_per_token(const std::vector<cellm_arch_layer_info>& layers, cellm_dtype type) {
    const bool coded = type == CELLM_TYPE_R4 || type == CELLM_TYPE_R3;
    uint64_t bytes = 0;
    for (const cellm_arch_layer_info& layer : layers) {
        auto row = static_cast<uint64_t>(layer.kv_dim / cellm_dtype_block_size(type)) *
                   static_cast<uint64_t>(cellm_dtype_type_size(type));
        if (type == CELLM_TYPE_I8) row += static_cast<uint64_t>(scale_runs(layer)) * sizeof(float);
        if (coded) row += static_cast<uint64_t>(scale_runs(layer)) * sizeof(uint16_t);
        bytes += 2 * row;
    }
    return bytes;
}

cellm_tensor_desc KvCache::tensor_shape(const cellm_arch_layer_info& info, int32_t kind) const {
    cellm_tensor_desc d{};
    d.struct_size = sizeof(d);
    d.n_dims = 2;
    d.ne[0] = info.kv_dim;
    d.ne[1] = n_slots_;
    d.ne[2] = d.ne[3] = 1;
    if (kind < 2) {
        d.type = type_;
    } else if (kind < 4) {
        d.type = coded() ? CELLM_TYPE_F16 : CELLM_TYPE_F32;
        d.ne[0] = scale_runs(info);
    } else {
        d.type = CELLM_TYPE_F32;
        d.ne[1] = 1;
        if (kind == 6) {  // [head_dim, 1, n_head_kv]: broadcasts over a KV head's query heads
            d.n_dims = 3;
            d.ne[0] = info.kv_dim / info.n_head_kv;
            d.ne[2] = info.n_head_kv;
        } else if (kind == 7) {
            d.ne[0] = info.kv_dim / info.n_head_kv;
        }
    }
    fill_strides(d);
    return d;
}

cellm_tensor_desc KvCache::tensor(int32_t layer, int32_t kind) const {
    if (layer < 0 || static_cast<size_t>(layer) >= layers_.size() || layers_[static_cast<size_t>(layer)].kv_dim == 0) {
        throw Error("layer " + std::to_string(layer) + " has no KV cache of its own");
    }
    if (kind < 0 || kind >= n_kinds() + (coded() ? n_constants : 0)) {
        throw Error("the KV cache has no tensor of kind " + std::to_string(kind));
    }
    cellm_tensor_desc d = tensor_shape(layers_[static_cast<size_t>(layer)], kind);
    d.buffer = buffer_->get();
    d.offset = placements_[static_cast<size_t>(layer)].offset[kind];
    return d;
}

void KvCache::write_constant(int32_t layer, int32_t kind, const std::vector<float>& values) {
    const cellm_tensor_desc t = tensor(layer, kind);
    if (static_cast<int64_t>(values.size()) != t.ne[0] * t.ne[1] * t.ne[2]) throw Error("a KV constant of the wrong size");
    check(backend_->iface().buffer_write(backend_->handle(), t.buffer, t.offset, values.data(), values.size() * sizeof(float)),
          "writing the KV cache's rotation constants");
}

void KvCache::set_key_transform(int32_t layer, const std::vector<float>& shift, const std::vector<float>& scale) {
    const cellm_arch_layer_info& info = layers_.at(static_cast<size_t>(layer));
    if (!coded() || shift.size() != static_cast<size_t>(info.kv_dim) || scale.size() != shift.size()) {
        throw Error("a key transform is for a coded KV cache, one shift and scale per value of a layer's K row");
    }
    std::vector<float> inverse(scale.size());
    for (size_t i = 0; i < scale.size(); ++i) inverse[i] = 1.0f / scale[i];
    write_constant(layer, 4, shift);
    write_constant(layer, 5, scale);
    write_constant(layer, 6, inverse);  // [head_dim, 1, n_head_kv] is the K row's order
}

uint64_t KvCache::hash_seed() const {
    return coded() ? (static_cast<uint64_t>(type_) << 32) ^ rotation_seed : static_cast<uint64_t>(type_);
}

int32_t KvCache::allocate() {
    // Ahead of need: a step that takes the last committed blocks would otherwise commit inside the next one.
    if (pool_.n_free_committed() <= chunk_blocks_ / 2 && pool_.n_committed() < pool_.n_blocks()) {
        const int32_t first = pool_.n_committed();
        const int32_t end = std::min(pool_.n_blocks(), first + chunk_blocks_);
        set_resident(first, end, true);
        pool_.grow(end - first);
    }
    const int32_t block = pool_.allocate();
    if (block >= 0 && window_rows_released(block)) restore_window_rows(block);
    return block;
}

void KvCache::release_window_rows(int32_t block) {
    if (window_ == 0 || window_rows_released(block)) return;
    window_released_[static_cast<size_t>(block)] = true;
    ++n_window_released_;
    // With released neighbours, so that pages shared with them go back too.
    int32_t first = block, end = block + 1;
    while (first > 0 && block - first < 8 && window_rows_released(first - 1)) --first;
    while (end < pool_.n_blocks() && end - block < 8 && window_rows_released(end)) ++end;
    set_resident(first, end, false, true);
}

void KvCache::restore_window_rows(int32_t block) {
    window_released_[static_cast<size_t>(block)] = false;
    --n_window_released_;
    set_resident(block, block + 1, true, true);
}

void KvCache::give_back(int32_t keep_free) {
    if (commit_ == nullptr) return;
    keep_free = std::max(keep_free, chunk_blocks_);  // headroom, so that use at the edge does not commit and give back in turn
    for (int32_t end = pool_.n_committed(); end > 0; end = pool_.n_committed()) {
        const int32_t n = (end - 1) % chunk_blocks_ + 1;  // the top chunk, perhaps a partial one
        if (pool_.n_free_committed() - n < keep_free) return;
        for (int32_t b = end - n; b < end; ++b) {
            if (pool_.references(b) > 0) return;
        }
        pool_.relocate_top(n, [this](int32_t from, int32_t to) {
            if (window_rows_released(to)) restore_window_rows(to);
            copy_block(from, to);
            if (window_rows_released(from)) release_window_rows(to);
        });
        pool_.shrink(n);
        set_resident(end - n, end, false);
        for (int32_t b = end - n; b < end; ++b) {
            if (window_rows_released(b)) {
                window_released_[static_cast<size_t>(b)] = false;
                --n_window_released_;
            }
        }
    }
}

uint64_t KvCache::committed_bytes() const {
    const auto block = static_cast<uint64_t>(block_size_);
    return (bytes_per_token() * static_cast<uint64_t>(pool_.n_committed()) -
            window_bytes_per_token_ * static_cast<uint64_t>(n_window_released_)) * block;
}

void KvCache::set_resident(int32_t first, int32_t end, bool resident, bool windowed_only) {
    if (commit_ == nullptr) return;
    for (size_t layer = 0; layer < layers_.size(); ++layer) {
        if (layers_[layer].kv_dim == 0 || (windowed_only && layers_[layer].window == 0)) continue;
        for (int32_t kind = 0; kind < n_kinds(); ++kind) {
            const cellm_tensor_desc pool = tensor(static_cast<int32_t>(layer), kind);
            const auto block = static_cast<uint64_t>(pool.nb[1]) * static_cast<uint64_t>(block_size_);
            check(commit_(backend_->handle(), pool.buffer, pool.offset + block * static_cast<uint64_t>(first),
                          block * static_cast<uint64_t>(end - first), resident ? 1 : 0),
                  resident ? "committing KV memory" : "giving back KV memory");
        }
    }
}

void KvCache::copy_block(int32_t from, int32_t to) {
    const Backend& b = *backend_;
    for (size_t layer = 0; layer < layers_.size(); ++layer) {
        if (layers_[layer].kv_dim == 0) continue;
        for (int32_t kind = 0; kind < n_kinds(); ++kind) {
            const cellm_tensor_desc pool = tensor(static_cast<int32_t>(layer), kind);
            const auto row = static_cast<uint64_t>(pool.nb[1]) * static_cast<uint64_t>(block_size_);
            scratch_.resize(row);
            check(b.iface().buffer_read(b.handle(), pool.buffer, pool.offset + row * static_cast<uint64_t>(from),
                                        scratch_.data(), row),
                  "copying a KV block");
            check(b.iface().buffer_write(b.handle(), pool.buffer, pool.offset + row * static_cast<uint64_t>(to),
                                         scratch_.data(), row),
                  "copying a KV block");
        }
    }
}

}  // namespace cellm
