// PyTorch zip checkpoints (pytorch_model.bin, its shards, .pt) through the safetensors plugin
// (plugins/formats/safetensors/pytorch_zip.h, pickle.h).
//  - Twins: a tiny transformers-made folder of tests/data/hf rewritten as a checkpoint gives the very logits of its
//    safetensors original (the same weights, so bit for bit), and `cellm-host convert` the very same .cellm file.
//    The torch.save twins need a Python with torch (scripts/hf_reference/pytorch_bin.py; skipped without one);
//    twins written by pytorch_cases.py, with the standard library only, always run.
//  - Refusals: hostile and broken archives from pytorch_cases.py, each refused with the expected code and one
//    line naming the file and what is wrong.
#include "open_outcome.h"
#include "test_support.h"

#include "plugin/host_api.h"

#include <cellm/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {


int run(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

const fs::path cases_script = fs::path(CELLM_SOURCE_DIR) / "tests/safetensors/pytorch_cases.py";

// The folders pytorch_cases.py writes, once per process; empty without python3.
const fs::path& cases_dir() {
    static const fs::path dir = [] {
        const fs::path d = temp_dir() / "pytorch-cases";
        if (std::string(CELLM_PYTHON3).empty()) return fs::path();
        if (run(shell_quote(CELLM_PYTHON3) + " " + shell_quote(cases_script) + " cases " + shell_quote(d)) != 0) {
            throw std::runtime_error("pytorch_cases.py cases failed");
        }
        return d;
    }();
    return dir;
}

// A Python that imports torch and safetensors: $CELLM_TORCH_PYTHON, else the venvs scripts/hf_reference uses.
const std::string& torch_python() {
    static const std::string python = [] {
        std::vector<std::string> candidates;
        if (const char* p = std::getenv("CELLM_TORCH_PYTHON")) candidates.emplace_back(p);
        if (const char* home = std::getenv("HOME")) {
            candidates.push_back(std::string(home) + "/.cache/cellm/venv-torch/bin/python");
            candidates.push_back(std::string(home) + "/.cache/cellm/venv-hf/bin/python");
        }
        for (const std::string& c : candidates) {
            if (fs::exists(c) && run(shell_quote(c) + " -c 'import torch, safetensors'") == 0) return c;
        }
        return std::string();
    }();
    return python;
}

std::vector<float> folder_logits(const fs::path& folder) {
    EngineOptions options;
    options.context_length = 64;
    Stack s = make_stack(folder, "scalar", options);
    return all_logits(s, {1, 17, 42, 99, 3, 120, 7, 64, 5, 11, 200, 33});
}

std::string file_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void expect_twin(const fs::path& original, const fs::path& twin) {
    const std::vector<float> expected = folder_logits(original);
    const std::vector<float> got = folder_logits(twin);
    ASSERT_EQ(got.size(), expected.size());
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0) << twin;
}

// --- twins --------------------------------------------------------------------------------------------------------

// qwen3 (untied), qwen2 (tied: the torch twins keep lm_head.weight as the embedding itself), BF16 (widened on load),
// Gemma 4 and SmolVLM (Llama text, Q/K permuted on load).
const char* const twin_folders[] = {"qwen3-tiny", "qwen2-tiny", "qwen3-tiny-bf16", "gemma4-tiny-dense", "smolvlm-tiny"};

class TorchSaveTwin : public ::testing::TestWithParam<const char*> {};

TEST_P(TorchSaveTwin, BinShardedAndPtGiveTheSafetensorsLogitsBitForBit) {
    if (torch_python().empty()) {
        GTEST_SKIP() << "no Python with torch and safetensors ($CELLM_TORCH_PYTHON, ~/.cache/cellm/venv-torch or "
                        "venv-hf: scripts/hf_reference/setup_venv.sh)";
    }
    const fs::path original = source_dir() / "tests/data/hf" / GetParam();
    const fs::path out = temp_dir() / (std::string("torch-") + GetParam());
    const std::string script = (source_dir() / "scripts/hf_reference/pytorch_bin.py").string();
    ASSERT_EQ(run(shell_quote(torch_python()) + " " + shell_quote(script) + " " + shell_quote(original.string()) + " " +
                  shell_quote(out.string())),
              0);
    for (const char* twin : {"bin", "sharded", "pt"}) expect_twin(original, out / twin);
}

INSTANTIATE_TEST_SUITE_P(Folders, TorchSaveTwin, ::testing::ValuesIn(twin_folders),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                             std::string name = p.param;
                             for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                             return name;
                         });

TEST(PytorchZip, StandardLibraryTwinsGiveTheSafetensorsLogitsBitForBit) {
    if (std::string(CELLM_PYTHON3).empty()) GTEST_SKIP() << "no python3 found at configure time";
    for (const char* folder : {"qwen3-tiny", "qwen2-tiny", "qwen3-tiny-bf16", "smolvlm-tiny"}) {
        const fs::path original = source_dir() / "tests/data/hf" / folder;
        const fs::path twin = temp_dir() / (std::string("stdlib-") + folder);
        ASSERT_EQ(run(shell_quote(CELLM_PYTHON3) + " " + shell_quote(cases_script) + " twin " +
                      shell_quote(original.string()) + " " + shell_quote(twin.string())),
                  0);
        expect_twin(original, twin);
    }
}

TEST(PytorchZip, ConvertWritesTheSafetensorsFolderCellmFile) {
    if (std::string(CELLM_PYTHON3).empty()) GTEST_SKIP() << "no python3 found at configure time";
    const fs::path original = source_dir() / "tests/data/hf/qwen3-tiny";
    const fs::path twin = temp_dir() / "convert-twin";
    ASSERT_EQ(run(shell_quote(CELLM_PYTHON3) + " " + shell_quote(cases_script) + " twin " + shell_quote(original.string()) +
                  " " + shell_quote(twin.string())),
              0);
    const fs::path a = temp_dir() / "from-safetensors.cellm", b = temp_dir() / "from-bin.cellm";
    const CommandResult ra = run_host("convert --input " + shell_quote(original.string()) + " --output " + shell_quote(a.string()));
    const CommandResult rb = run_host("convert --input " + shell_quote(twin.string()) + " --output " + shell_quote(b.string()));
    ASSERT_EQ(ra.exit_code, 0) << ra.err;
    ASSERT_EQ(rb.exit_code, 0) << rb.err;
    EXPECT_TRUE(file_bytes(a) == file_bytes(b)) << "the .cellm files differ";
}

// The valid shapes torch.save writes open, and the view serves the storage's bytes in place.
TEST(PytorchZip, ValidArchivesOpenAndServeTheStorageBytes) {
    if (cases_dir().empty()) GTEST_SKIP() << "no python3 found at configure time";
    for (const char* name : {"valid", "valid_top_folder", "valid_pt", "valid_parameter", "valid_metadata", "valid_sharded"}) {
        SCOPED_TRACE(name);
        cellm_model_file* file = nullptr;
        cellm_status* status = safetensors_format().open((cases_dir() / name).c_str(), &file);
        ASSERT_EQ(status, nullptr) << host_api()->status_message(status);
        cellm_model_view view{};
        view.struct_size = sizeof(view);
        ASSERT_EQ(safetensors_format().get_view(file, &view), nullptr);
        bool found = false;
        for (uint64_t i = 0; i < view.n_tensors; ++i) {
            const cellm_tensor_info* t = cellm_model_tensor(&view, i);
            if (std::string_view(t->name.data, t->name.len) != "output_norm.weight") continue;
            found = true;
            ASSERT_EQ(t->size, 32u);
            const auto* p = static_cast<const uint8_t*>(t->data);
            for (uint8_t k = 0; k < 32; ++k) EXPECT_EQ(p[k], k + 1);
            // torch.save pads each storage to 64 bytes in the file, and pytorch_cases.py does too.
            EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
        }
        EXPECT_TRUE(found);
        safetensors_format().close(file);
    }
}

// --- refusals -----------------------------------------------------------------------------------------------------

struct Refusal {
    const char* name;  // the folder pytorch_cases.py writes
    cellm_status_code code;
    const char* file;     // expected in the message: the file at fault
    const char* message;  // expected substring
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

constexpr const char* bin = "pytorch_model.bin";

const Refusal refusals[] = {
    // Code execution and anything else outside a state dict.
    {"os_system", CELLM_ERR_UNSUPPORTED, bin, "global 'posix.system' at byte"},
    {"os_system_protocol4", CELLM_ERR_UNSUPPORTED, bin, "global 'posix.system'"},
    {"builtins_eval", CELLM_ERR_UNSUPPORTED, bin, "global 'builtins.eval' at byte 2 is refused"},
    {"reduce_storage_type", CELLM_ERR_UNSUPPORTED, bin, "REDUCE at byte 25 calls 'torch.FloatStorage'"},
    {"reduce_string", CELLM_ERR_UNSUPPORTED, bin, "REDUCE at byte 17 calls a string"},
    {"unknown_opcode", CELLM_ERR_UNSUPPORTED, bin, "pickle opcode 0x81 at byte 2 is refused"},
    {"inst_opcode", CELLM_ERR_UNSUPPORTED, bin, "pickle opcode 0x69 'i' at byte 2 is refused"},
    {"not_a_dict", CELLM_ERR_UNSUPPORTED, bin, "pickle holds a list, not a state dict"},
    {"not_a_tensor", CELLM_ERR_UNSUPPORTED, bin, "entry 'model.norm.weight' is a int, not a tensor"},
    {"bad_persistent_id", CELLM_ERR_UNSUPPORTED, bin, "is not ('storage', torch.<Type>Storage, key, location, numel)"},
    {"memo_missing", CELLM_ERR_CORRUPT, bin, "memo entry 7 was never stored"},
    {"stack_underflow", CELLM_ERR_CORRUPT, bin, "stack underflow"},
    // Broken pickles, storages and views.
    {"truncated_pickle", CELLM_ERR_CORRUPT, "archive/data.pkl", "truncated"},
    {"truncated_storage", CELLM_ERR_CORRUPT, bin, "holds 20 bytes, its 8 elements of FloatStorage need 32"},
    {"missing_storage", CELLM_ERR_CORRUPT, bin, "storage '0' has no entry archive/data/0"},
    {"stride_past_storage", CELLM_ERR_CORRUPT, bin, "stride [2]) reads past the 8 elements of its storage '0'"},
    {"offset_past_storage", CELLM_ERR_CORRUPT, bin, "(offset 4, size [8], stride [1]) reads past"},
    {"size_past_storage", CELLM_ERR_CORRUPT, bin, "size [4, 4], stride [4, 1]) reads past"},
    {"non_contiguous", CELLM_ERR_UNSUPPORTED, bin, "is not contiguous (size [2, 4], stride [1, 2])"},
    {"long_storage", CELLM_ERR_UNSUPPORTED, bin, "is stored as LongStorage"},
    {"zero_dims", CELLM_ERR_UNSUPPORTED, bin, "has 0 dimensions"},
    {"five_dims", CELLM_ERR_UNSUPPORTED, bin, "has 5 dimensions (cellm takes 1..4)"},
    {"duplicate_name", CELLM_ERR_CORRUPT, bin, "tensor 'model.norm.weight' appears twice in the state dict"},
    // Broken archives.
    {"entry_past_file", CELLM_ERR_CORRUPT, bin, "zip entry 'archive/data/0' claims 2147483632 bytes"},
    {"compressed_storage", CELLM_ERR_UNSUPPORTED, bin, "zip entry 'archive/data/0' is compressed (method 8)"},
    {"no_data_pkl", CELLM_ERR_CORRUPT, bin, "zip archive without <folder>/data.pkl"},
    {"truncated_file", CELLM_ERR_CORRUPT, bin, "without its end of central directory record"},
    {"big_endian", CELLM_ERR_UNSUPPORTED, "archive/byteorder", "says 'big'"},
    {"legacy_pickle", CELLM_ERR_CORRUPT, bin, "not a zip archive"},
    {"two_pt_files", CELLM_ERR_INVALID_ARGUMENT, "two_pt_files", "has 2 .pt files (a.pt, b.pt)"},
};

class PytorchRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(PytorchRefusal, FailsWithOneClearLine) {
    if (cases_dir().empty()) GTEST_SKIP() << "no python3 found at configure time";
    const Refusal& r = GetParam();
    const fs::path folder = cases_dir() / r.name;
    ASSERT_TRUE(fs::is_directory(folder)) << "pytorch_cases.py wrote no case " << r.name;
    const Outcome o = try_open(folder);
    EXPECT_EQ(o.code, r.code) << o.message;
    EXPECT_NE(o.message.find(r.file), std::string::npos) << o.message;
    EXPECT_NE(o.message.find(r.message), std::string::npos) << o.message;
    EXPECT_EQ(o.message.find('\n'), std::string::npos) << o.message;
}

INSTANTIATE_TEST_SUITE_P(Cases, PytorchRefusal, ::testing::ValuesIn(refusals),
                         [](const ::testing::TestParamInfo<Refusal>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace cellm::testing
