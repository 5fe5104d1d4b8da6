// libFuzzer target: the .cellm format plugin. The input is a whole .cellm file.
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto path = cellm::fuzz::scratch() / "input.cellm";
    cellm::fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
    cellm::fuzz::open_and_walk(path);
    return 0;
}
