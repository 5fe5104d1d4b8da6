// PNG through libpng. libpng reports errors by longjmp, so every libpng call runs inside a small function that
// owns a setjmp and holds no C++ object with a destructor; those functions return false on error and the C++
// around them throws.
#include <png.h>

#include <cstdio>
#include <cstring>

#include "error.h"
#include "vision/codecs.h"

namespace cellm::vision {
namespace {

struct PngSource {
    std::span<const std::uint8_t> bytes;
    std::size_t offset = 0;
    char message[256] = {};
};

void on_error(png_structp png, png_const_charp message) {
    auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
    std::snprintf(source->message, sizeof source->message, "%s", message);
    png_longjmp(png, 1);
}

// libpng warns about damaged ancillary chunks and drops them; the pixels are still right, as PIL's are.
void on_warning(png_structp, png_const_charp) {}

void on_read(png_structp png, png_bytep out, std::size_t count) {
    auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
    if (count > source->bytes.size() - source->offset) png_error(png, "truncated PNG data");
    std::memcpy(out, source->bytes.data() + source->offset, count);
    source->offset += count;
}

struct PngHeader {
    png_uint_32 width = 0;
    png_uint_32 height = 0;
    int color_type = 0;
    int bit_depth = 0;
    bool has_key = false;  // a transparent colour that PIL keeps through convert("RGB") (below)
    std::uint8_t key[3] = {};
};

// PIL carries a tRNS colour key through convert("RGB") as info["transparency"] for 8-bit (or less) gray, 8-bit
// RGB, and palettes whose tRNS makes exactly one entry transparent (an alpha per entry is dropped instead). The
// processor's convert_to_rgb then composites such an image onto white, so every pixel of that colour turns white.
// A gray key is compared with the scaled samples as PIL does, unscaled.
void read_color_key(png_structp png, png_infop info, PngHeader* header) {
    png_bytep alphas = nullptr;
    int count = 0;
    png_color_16p color = nullptr;
    if (png_get_tRNS(png, info, &alphas, &count, &color) == 0) return;
    if (header->color_type == PNG_COLOR_TYPE_PALETTE && alphas) {
        int transparent = -1;
        for (int i = 0; i < count; ++i) {
            if (alphas[i] == 255) continue;
            if (alphas[i] != 0 || transparent >= 0) return;
            transparent = i;
        }
        png_colorp palette = nullptr;
        int entries = 0;
        if (transparent < 0 || png_get_PLTE(png, info, &palette, &entries) == 0 || transparent >= entries) return;
        header->key[0] = palette[transparent].red;
        header->key[1] = palette[transparent].green;
        header->key[2] = palette[transparent].blue;
        header->has_key = true;
    } else if (header->color_type == PNG_COLOR_TYPE_GRAY && header->bit_depth <= 8 && color) {
        // PIL reads a 1-bit image as mode "1", whose key does not survive the conversion.
        if (header->bit_depth == 1 || color->gray > 255) return;
        header->key[0] = header->key[1] = header->key[2] = static_cast<std::uint8_t>(color->gray);
        header->has_key = true;
    } else if (header->color_type == PNG_COLOR_TYPE_RGB && header->bit_depth == 8 && color) {
        if (color->red > 255 || color->green > 255 || color->blue > 255) return;
        header->key[0] = static_cast<std::uint8_t>(color->red);
        header->key[1] = static_cast<std::uint8_t>(color->green);
        header->key[2] = static_cast<std::uint8_t>(color->blue);
        header->has_key = true;
    }
}

// Reads up to the image data and sets the transformations that give PIL's convert("RGB"): palette looked up,
// gray of 1, 2 or 4 bits scaled to 8 (as PIL's "1", "L;2", "L;4" modes are), 16-bit samples cut to their high
// byte (PIL's "RGB;16B", "RGBA;16B", "LA;16B" raw modes), alpha and tRNS transparency dropped, gray replicated.
// 16-bit gray without alpha is left at 16 bits: PIL opens it as mode "I;16", whose conversion clips (below).
bool read_header(png_structp png, png_infop info, PngHeader* header) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_read_info(png, info);
    png_get_IHDR(png, info, &header->width, &header->height, &header->bit_depth, &header->color_type, nullptr,
                 nullptr, nullptr);
    read_color_key(png, info, header);
    const bool gray = (header->color_type & PNG_COLOR_MASK_COLOR) == 0;
    const bool gray16 = header->color_type == PNG_COLOR_TYPE_GRAY && header->bit_depth == 16;
    if (header->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (gray && header->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (header->bit_depth == 16 && !gray16) png_set_strip_16(png);
    png_set_strip_alpha(png);
    if (gray && !gray16) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    return true;
}

bool read_rows(png_structp png, png_bytepp rows) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_read_image(png, rows);
    return true;
}

struct PngHandles {
    png_structp png = nullptr;
    png_infop info = nullptr;
    ~PngHandles() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

DecodedImage decode_png(std::span<const std::uint8_t> bytes, const std::string& name, std::uint64_t max_pixels) {
    auto fail = [&](const std::string& what) { return Error("image " + name + ": " + what); };
    PngSource source{bytes};
    PngHandles handles;
    handles.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, on_error, on_warning);
    if (handles.png) handles.info = png_create_info_struct(handles.png);
    if (!handles.info) throw fail("cannot start the PNG decoder");
    png_set_read_fn(handles.png, &source, on_read);

    PngHeader header;
    if (!read_header(handles.png, handles.info, &header)) throw fail(std::string("bad PNG: ") + source.message);
    const std::uint64_t pixels = std::uint64_t{header.width} * header.height;
    if (pixels > max_pixels)
        throw fail(std::to_string(header.width) + "x" + std::to_string(header.height) + " is over the limit of " +
                   std::to_string(max_pixels) + " pixels");
    const bool gray16 = header.color_type == PNG_COLOR_TYPE_GRAY && header.bit_depth == 16;
    const std::size_t row_bytes = png_get_rowbytes(handles.png, handles.info);
    const std::size_t expected = std::size_t{header.width} * (gray16 ? 2 : 3);
    if (row_bytes != expected) throw fail("unexpected PNG row layout");

    std::vector<std::uint8_t> data(row_bytes * header.height);
    std::vector<png_bytep> rows(header.height);
    for (std::size_t y = 0; y < rows.size(); ++y) rows[y] = data.data() + y * row_bytes;
    if (!read_rows(handles.png, rows.data())) throw fail(std::string("bad PNG: ") + source.message);

    DecodedImage out;
    out.image.width = static_cast<int>(header.width);
    out.image.height = static_cast<int>(header.height);
    if (gray16) {
        // PIL converts its "I;16" mode to 8 bits by clipping, not scaling: 0..255 stay, everything above is 255.
        out.image.rgb.resize(pixels * 3);
        for (std::size_t i = 0; i < pixels; ++i) {
            const unsigned value = (unsigned{data[2 * i]} << 8) | data[2 * i + 1];
            const auto clipped = static_cast<std::uint8_t>(value > 255 ? 255 : value);
            std::memset(&out.image.rgb[3 * i], clipped, 3);
        }
    } else {
        out.image.rgb = std::move(data);
        if (header.has_key) {
            for (std::size_t i = 0; i < pixels; ++i) {
                std::uint8_t* rgb = &out.image.rgb[3 * i];
                if (std::memcmp(rgb, header.key, 3) == 0) std::memset(rgb, 255, 3);
            }
        }
    }
    png_uint_32 exif_size = 0;
    png_bytep exif = nullptr;
    if (png_get_eXIf_1(handles.png, handles.info, &exif_size, &exif) != 0 && exif)
        out.exif.assign(exif, exif + exif_size);
    return out;
}

}  // namespace cellm::vision
