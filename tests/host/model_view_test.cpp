// The host does not trust a format plugin's model view: bad tensors are refused before anything indexes them.
#include "error.h"
#include "model/model_file.h"

#include <gtest/gtest.h>

#include <vector>

namespace cellm {
namespace {

struct FakeView {
    std::vector<char> file = std::vector<char>(256);
    cellm_tensor_info tensor{};
    cellm_model_view view{};
    FakeView() {
        tensor.struct_size = sizeof(tensor);
        tensor.name = {"w", 1};
        tensor.type = CELLM_TYPE_Q8_0;
        tensor.n_dims = 2;
        tensor.ne[0] = 32;
        tensor.ne[1] = 2;
        tensor.ne[2] = tensor.ne[3] = 1;
        tensor.data = file.data() + 64;
        tensor.size = 2 * 34;
        view.struct_size = sizeof(view);
        view.n_tensors = 1;
        view.tensors = &tensor;
        view.tensor_stride = sizeof(tensor);
        view.mapping = file.data();
        view.mapping_size = file.size();
    }
    std::string error() {
        try {
            ModelFile::validate(view, "m.gguf");
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
};

TEST(ModelView, AcceptsAWellFormedView) { EXPECT_EQ(FakeView().error(), ""); }

TEST(ModelView, RefusesEachKindOfBadTensor) {
    FakeView outside;
    outside.tensor.data = outside.file.data() + 200;
    EXPECT_NE(outside.error().find("outside the mapped file"), std::string::npos);

    FakeView size;
    size.tensor.size = 100;
    EXPECT_NE(size.error().find("its shape needs 68"), std::string::npos);

    FakeView type;
    type.tensor.type = CELLM_TYPE_COUNT_GGUF;  // past every known type
    EXPECT_NE(type.error().find("unknown type"), std::string::npos);

    FakeView dims;
    dims.tensor.n_dims = 5;
    EXPECT_NE(dims.error().find("dimensions"), std::string::npos);

    FakeView shape;
    shape.tensor.ne[1] = 0;
    EXPECT_NE(shape.error().find("bad shape"), std::string::npos);

    FakeView blocks;
    blocks.tensor.ne[0] = 16;
    EXPECT_NE(blocks.error().find("whole blocks"), std::string::npos);

    FakeView stride;
    stride.view.tensor_stride = 8;
    EXPECT_NE(stride.error().find("stride"), std::string::npos);
}

}  // namespace
}  // namespace cellm
