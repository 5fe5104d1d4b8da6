// Writer -> plugin round trips: every metadata type, arrays, versions 2 and 3, alignments, the view.
#include "gguf_plugin.h"
#include "gguf_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

namespace cellm::test {
namespace {

using gguf::Writer;

std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
    std::vector<uint8_t> out(values.size() * sizeof(float));
    std::memcpy(out.data(), values.data(), out.size());
    return out;
}

template <class T>
void expect_numeric_array(const OpenedModel& m, const std::string& key, const std::vector<T>& expected) {
    const cellm_meta_kv* kv = m.meta(key);
    ASSERT_NE(kv, nullptr) << key;
    ASSERT_EQ(kv->value.type, CELLM_VALUE_ARRAY) << key;
    EXPECT_EQ(kv->value.v.arr.elem_type, gguf::value_type_of<T>()) << key;
    ASSERT_EQ(kv->value.v.arr.count, expected.size()) << key;
    for (size_t i = 0; i < expected.size(); ++i) {
        T got;
        std::memcpy(&got, static_cast<const char*>(kv->value.v.arr.data) + i * sizeof(T), sizeof(T));
        EXPECT_EQ(got, expected[i]) << key << "[" << i << "]";
    }
}

class VersionTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(VersionTest, EveryScalarTypeRoundTripsWidened) {
    Writer w(GetParam());
    w.add("u8", uint8_t{250});
    w.add("i8", int8_t{-100});
    w.add("u16", uint16_t{65000});
    w.add("i16", int16_t{-30000});
    w.add("u32", uint32_t{4000000000u});
    w.add("i32", int32_t{-2000000000});
    w.add("f32", 1.5f);
    w.add("bool", true);
    w.add("string", std::string_view("héllo\0world", 12));
    w.add("u64", std::numeric_limits<uint64_t>::max());
    w.add("i64", std::numeric_limits<int64_t>::min());
    w.add("f64", 0.1);
    w.add("empty", "");
    OpenedModel m(write_temp_file("scalars_v" + std::to_string(GetParam()) + ".gguf", w.to_bytes()));
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(m.view().n_meta, 13u);
    EXPECT_EQ(m.meta("u8")->value.v.u64, 250u);
    EXPECT_EQ(m.meta("i8")->value.v.i64, -100);
    EXPECT_EQ(m.meta("u16")->value.v.u64, 65000u);
    EXPECT_EQ(m.meta("i16")->value.v.i64, -30000);
    EXPECT_EQ(m.meta("u32")->value.v.u64, 4000000000u);
    EXPECT_EQ(m.meta("i32")->value.v.i64, -2000000000);
    EXPECT_EQ(m.meta("f32")->value.v.f64, 1.5);
    EXPECT_EQ(m.meta("bool")->value.type, CELLM_VALUE_BOOL);
    EXPECT_EQ(m.meta("bool")->value.v.u64, 1u);
    EXPECT_EQ(str(m.meta("string")->value.v.str), std::string("héllo\0world", 12));
    EXPECT_EQ(m.meta("u64")->value.v.u64, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(m.meta("i64")->value.v.i64, std::numeric_limits<int64_t>::min());
    EXPECT_EQ(m.meta("f64")->value.v.f64, 0.1);
    EXPECT_EQ(m.meta("empty")->value.v.str.len, 0u);
    EXPECT_EQ(m.meta("u16")->value.type, CELLM_VALUE_U16);
    EXPECT_EQ(m.view().n_tensors, 0u);
}

TEST_P(VersionTest, ArraysOfEveryKindRoundTrip) {
    Writer w(GetParam());
    w.add_array("a.u8", std::vector<uint8_t>{1, 2, 255});
    w.add_array("a.i8", std::vector<int8_t>{-1, 0, 127});
    w.add_array("a.u16", std::vector<uint16_t>{1, 65535});
    w.add_array("a.i16", std::vector<int16_t>{-32768, 5});
    w.add_array("a.u32", std::vector<uint32_t>{7, 8, 9});
    w.add_array("a.i32", std::vector<int32_t>{-7, 1 << 30});
    w.add_array("a.f32", std::vector<float>{0.5f, -2.25f});
    w.add_array("a.u64", std::vector<uint64_t>{1ull << 63});
    w.add_array("a.i64", std::vector<int64_t>{-(1ll << 62)});
    w.add_array("a.f64", std::vector<double>{3.25, -0.0});
    w.add_array("a.bool", std::vector<bool>{true, false, true});
    w.add_array("a.empty", std::vector<int32_t>{});
    w.add_array("a.str", std::vector<std::string>{"Ġthe", "", "<|im_end|>"});
    // An array of two arrays of u8: exposed with its count only.
    std::vector<uint8_t> nested;
    Writer::put(nested, static_cast<uint32_t>(CELLM_VALUE_ARRAY));
    Writer::put(nested, uint64_t{2});
    for (int i = 0; i < 2; ++i) {
        Writer::put(nested, static_cast<uint32_t>(CELLM_VALUE_U8));
        Writer::put(nested, uint64_t{1});
        Writer::put(nested, uint8_t{42});
    }
    w.add_raw("a.nested", CELLM_VALUE_ARRAY, nested);
    w.add("after", uint32_t{77});

    OpenedModel m(write_temp_file("arrays_v" + std::to_string(GetParam()) + ".gguf", w.to_bytes()));
    ASSERT_TRUE(m.ok());
    expect_numeric_array<uint8_t>(m, "a.u8", {1, 2, 255});
    expect_numeric_array<int8_t>(m, "a.i8", {-1, 0, 127});
    expect_numeric_array<uint16_t>(m, "a.u16", {1, 65535});
    expect_numeric_array<int16_t>(m, "a.i16", {-32768, 5});
    expect_numeric_array<uint32_t>(m, "a.u32", {7, 8, 9});
    expect_numeric_array<int32_t>(m, "a.i32", {-7, 1 << 30});
    expect_numeric_array<float>(m, "a.f32", {0.5f, -2.25f});
    expect_numeric_array<uint64_t>(m, "a.u64", {1ull << 63});
    expect_numeric_array<int64_t>(m, "a.i64", {-(1ll << 62)});
    expect_numeric_array<double>(m, "a.f64", {3.25, -0.0});
    EXPECT_EQ(m.meta("a.empty")->value.v.arr.count, 0u);

    const auto& b = m.meta("a.bool")->value.v.arr;
    EXPECT_EQ(b.elem_type, CELLM_VALUE_BOOL);
    ASSERT_EQ(b.count, 3u);
    EXPECT_EQ(static_cast<const uint8_t*>(b.data)[0], 1);
    EXPECT_EQ(static_cast<const uint8_t*>(b.data)[1], 0);

    const auto& s = m.meta("a.str")->value.v.arr;
    EXPECT_EQ(s.elem_type, CELLM_VALUE_STRING);
    ASSERT_EQ(s.count, 3u);
    const auto* refs = static_cast<const cellm_string_ref*>(s.data);
    EXPECT_EQ(str(refs[0]), "Ġthe");
    EXPECT_EQ(str(refs[1]), "");
    EXPECT_EQ(str(refs[2]), "<|im_end|>");

    const auto& n = m.meta("a.nested")->value.v.arr;
    EXPECT_EQ(n.elem_type, CELLM_VALUE_ARRAY);
    EXPECT_EQ(n.count, 2u);
    EXPECT_EQ(n.data, nullptr);
    EXPECT_EQ(m.meta("after")->value.v.u64, 77u);
}

INSTANTIATE_TEST_SUITE_P(Gguf, VersionTest, ::testing::Values(2u, 3u));

class AlignmentTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(AlignmentTest, TensorDataLandsOnTheAlignmentAndIsNotCopied) {
    const uint32_t alignment = GetParam();
    Writer w;
    w.add("general.architecture", "test");
    w.set_alignment(alignment);
    w.add_tensor("a", CELLM_TYPE_F32, {3}, f32_bytes({1, 2, 3}));
    w.add_tensor("b", CELLM_TYPE_F32, {2, 2}, f32_bytes({4, 5, 6, 7}));
    std::vector<uint8_t> q8(34 * 2, 0x11);
    w.add_tensor("c", CELLM_TYPE_Q8_0, {32, 2}, q8);
    const gguf::Layout layout = w.layout();
    OpenedModel m(write_temp_file("align" + std::to_string(alignment) + ".gguf", w.to_bytes()));
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(m.view().n_tensors, 3u);
    EXPECT_EQ(m.view().tensor_stride, sizeof(cellm_tensor_info));
    EXPECT_EQ(m.view().mapping_size, layout.size);
    const auto* base = static_cast<const uint8_t*>(m.view().mapping);
    const char* names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; ++i) {
        const cellm_tensor_info* t = cellm_model_tensor(&m.view(), static_cast<uint64_t>(i));
        EXPECT_EQ(t->struct_size, sizeof(cellm_tensor_info));
        EXPECT_EQ(str(t->name), names[i]);
        const auto* data = static_cast<const uint8_t*>(t->data);
        EXPECT_EQ(data - base, static_cast<ptrdiff_t>(layout.tensors[static_cast<size_t>(i)].data));
        EXPECT_EQ(static_cast<uint64_t>(data - base) % alignment, 0u);
    }
    const cellm_tensor_info* b = m.tensor("b");
    EXPECT_EQ(b->n_dims, 2u);
    EXPECT_EQ(b->ne[0], 2);
    EXPECT_EQ(b->ne[1], 2);
    EXPECT_EQ(b->ne[2], 1);
    EXPECT_EQ(b->ne[3], 1);
    EXPECT_EQ(b->size, 16u);
    EXPECT_EQ(static_cast<const float*>(b->data)[3], 7.0f);
    EXPECT_EQ(m.tensor("c")->type, CELLM_TYPE_Q8_0);
    EXPECT_EQ(m.tensor("c")->size, 68u);
}

INSTANTIATE_TEST_SUITE_P(Gguf, AlignmentTest, ::testing::Values(1u, 8u, 32u, 64u, 4096u));

TEST(GgufPlugin, ProbeRecognisesTheMagic) {
    const uint8_t gguf_head[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    const uint8_t other[] = {'G', 'G', 'M', 'L', 3, 0, 0, 0};
    EXPECT_EQ(gguf_format().probe("x.gguf", gguf_head, sizeof(gguf_head)), 100);
    EXPECT_EQ(gguf_format().probe("x.gguf", other, sizeof(other)), 0);
    EXPECT_EQ(gguf_format().probe("x.gguf", gguf_head, 3), 0);
    EXPECT_EQ(gguf_format().probe("dir", nullptr, 0), 0);
}

TEST(GgufPlugin, ViewFillsOnlyTheFieldsTheCallerKnows) {
    Writer w;
    w.add("k", uint32_t{1});
    const std::string path = write_temp_file("oldview.gguf", w.to_bytes());
    cellm_model_file* file = nullptr;
    ASSERT_EQ(gguf_format().open(path.c_str(), &file), nullptr);
    cellm_model_view view;
    std::memset(&view, 0xAB, sizeof(view));
    view.struct_size = offsetof(cellm_model_view, n_tensors);  // an older caller: only n_meta and meta
    EXPECT_EQ(gguf_format().get_view(file, &view), nullptr);
    EXPECT_EQ(view.struct_size, offsetof(cellm_model_view, n_tensors));
    EXPECT_EQ(view.n_meta, 1u);
    uint64_t untouched;
    std::memset(&untouched, 0xAB, sizeof(untouched));
    EXPECT_EQ(view.n_tensors, untouched);
    gguf_format().close(file);
}

}  // namespace
}  // namespace cellm::test
