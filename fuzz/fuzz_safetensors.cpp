// libFuzzer target: the safetensors format plugin on a Hugging Face model folder. The input is
// config.json, tokenizer.json, model.safetensors and, optionally, processor_config.json (what an Idefics3 folder's
// image processor reads) joined by the separator below (make_corpus.sh writes seeds that way); a part that is
// missing leaves its file out of the folder.
#include "fuzz_common.h"

#include <array>

namespace {

constexpr std::string_view separator = "\n--8<--\n";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    std::array<std::string_view, 4> parts{};
    size_t n = 0;
    for (; n < 3; ++n) {
        const size_t at = rest.find(separator);
        if (at == std::string_view::npos) break;
        parts[n] = rest.substr(0, at);
        rest.remove_prefix(at + separator.size());
    }
    parts[n++] = rest;
    static constexpr std::array<const char*, 4> names = {"config.json", "tokenizer.json", "model.safetensors",
                                                         "processor_config.json"};
    const auto dir = cellm::fuzz::scratch() / "folder";
    std::filesystem::create_directories(dir);
    for (size_t i = 0; i < names.size(); ++i) {
        // Without separators the whole input is the safetensors file, beside an empty config.
        const size_t part = n == 1 ? (i == 2 ? 0 : 4) : i;
        if (part < n) {
            cellm::fuzz::write_file(dir / names[i], parts[part]);
        } else if (i == 0 && n == 1) {
            cellm::fuzz::write_file(dir / names[i], "{}");
        } else {
            std::filesystem::remove(dir / names[i]);
        }
    }
    cellm::fuzz::open_and_walk(dir);
    return 0;
}
