// The KV cache sized per layer (ABI 1.2's get_layer_info): each layer's pools have its own row width, a layer
// without pools takes no memory and cannot be named, and blocks copy in every layer that has pools.
#include "test_support.h"

#include "error.h"
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cellm::testing {
namespace {

Backend scalar_backend() {
    const Plugin* plugin = registry().find(CELLM_PLUGIN_BACKEND, "scalar");
    if (plugin == nullptr) throw std::runtime_error("the scalar backend was not built");
    return Backend(*plugin, {});
}

cellm_arch_layer_info layer(int32_t kv_dim, int32_t n_head_kv) {
    return {sizeof(cellm_arch_layer_info), kv_dim, n_head_kv, {0, 0}, 0};
}

const std::vector<cellm_arch_layer_info> kMixed = {layer(64, 2), layer(0, 0), layer(128, 1)};

TEST(KvLayers, EachLayerHasItsOwnRowWidth) {
    Backend backend = scalar_backend();
    for (cellm_dtype type : {CELLM_TYPE_F16, CELLM_TYPE_I8}) {
        KvCache kv(backend, kMixed, 4, 16, type);
        EXPECT_EQ(kv.tensor(0, 0).ne[0], 64);
        EXPECT_EQ(kv.tensor(0, 1).ne[0], 64);
        EXPECT_EQ(kv.tensor(2, 1).ne[0], 128);
        EXPECT_EQ(kv.tensor(2, 0).ne[1], 64);  // slots: 4 blocks of 16
        EXPECT_THROW(kv.tensor(1, 0), Error);
        EXPECT_THROW(kv.tensor(3, 0), Error);
        if (type == CELLM_TYPE_I8) {
            EXPECT_EQ(kv.tensor(0, 2).ne[0], 2);  // one scale per KV head
            EXPECT_EQ(kv.tensor(2, 3).ne[0], 1);
            EXPECT_EQ(kv.bytes_per_token(), 2u * (64 + 2 * 4) + 2u * (128 + 1 * 4));
        } else {
            EXPECT_EQ(kv.bytes_per_token(), 2u * 2u * (64 + 128));
        }
        // Pools never overlap and each starts where any device may bind it.
        std::vector<std::pair<uint64_t, uint64_t>> spans;
        for (int32_t il : {0, 2}) {
            for (int32_t kind = 0; kind < kv.n_kinds(); ++kind) {
                const cellm_tensor_desc d = kv.tensor(il, kind);
                EXPECT_EQ(d.offset % 256, 0u);
                spans.emplace_back(d.offset, d.offset + static_cast<uint64_t>(d.nb[2]));
            }
        }
        std::sort(spans.begin(), spans.end());
        for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
        EXPECT_LE(spans.back().second, kv.bytes());
    }
}

TEST(KvLayers, CopyBlockCopiesEveryLayerWithPools) {
    Backend backend = scalar_backend();
    KvCache kv(backend, kMixed, 4, 16, CELLM_TYPE_F32);
    const cellm_tensor_desc v = kv.tensor(2, 1);
    const uint64_t block = static_cast<uint64_t>(v.nb[1]) * 16;
    std::vector<float> pattern(block / sizeof(float));
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<float>(i) * 0.5f;
    const auto& b = backend.iface();
    ASSERT_EQ(b.buffer_write(backend.handle(), v.buffer, v.offset + block, pattern.data(), block), nullptr);
    kv.copy_block(1, 3);
    std::vector<float> back(pattern.size());
    ASSERT_EQ(b.buffer_read(backend.handle(), v.buffer, v.offset + 3 * block, back.data(), block), nullptr);
    EXPECT_EQ(back, pattern);
}

TEST(KvLayers, Q8NeedsRowsThatSplitIntoScaleRuns) {
    Backend backend = scalar_backend();
    const std::vector<cellm_arch_layer_info> odd = {layer(64, 2), layer(40, 0)};
    try {
        KvCache kv(backend, odd, 4, 16, CELLM_TYPE_I8);
        FAIL() << "a 40-value row without heads has no q8 scale runs";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("layer 1"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace cellm::testing
