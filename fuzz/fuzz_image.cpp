// libFuzzer target: the PNG and JPEG decoders behind SmolVLM's image input (host/vision), then the Idefics3
// preprocessing of whatever they decode. Every rejection must be a cellm::Error; anything else escaping, a
// libpng/libjpeg longjmp gone wrong or an out-of-bounds read is a finding.
#include "error.h"
#include "vision/idefics3_processor.h"
#include "vision/image.h"

#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // A pixel limit far below the default keeps each input's work small; headers over it are rejected before
    // any pixel memory is allocated, which is itself under test.
    constexpr std::uint64_t max_pixels = 1u << 20;
    try {
        const cellm::vision::Image image = cellm::vision::decode_image(std::span(data, size), "fuzz", max_pixels);
        cellm::vision::Idefics3Config small;
        small.longest_edge = 32;
        small.tile = 16;
        const cellm::vision::Idefics3Image tiles = cellm::vision::preprocess_idefics3(image, small);
        (void)tiles.pixels.size();
    } catch (const cellm::Error&) {
    }
    return 0;
}
