// JPEG through libjpeg-turbo, with libjpeg's default decoding (accurate integer IDCT, fancy upsampling) as PIL
// uses it. libjpeg reports errors through error_exit, which must not return: it longjmps out of the small
// functions below, which hold no C++ object with a destructor, and the C++ around them throws.
#include <cstdio>
#include <csetjmp>
#include <cstring>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <jerror.h>

#include "error.h"
#include "vision/codecs.h"

namespace cellm::vision {
namespace {

struct JpegErrors {
    jpeg_error_mgr manager;  // first, so that libjpeg's pointer to it is a pointer to the whole
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    errors->manager.format_message(cinfo, errors->message);
    std::longjmp(errors->jump, 1);
}

// Out of data, libjpeg invents an end of image and only warns, leaving the rest gray; PIL refuses a truncated
// file ("image file is truncated"), so that warning is an error here. Other warnings (extraneous bytes before
// a marker, ...) are decoded through, as PIL does.
void on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error_exit(cinfo);
}

bool read_header(jpeg_decompress_struct* cinfo, JpegErrors* errors, const std::uint8_t* data, unsigned long size) {
    if (setjmp(errors->jump)) return false;
    jpeg_mem_src(cinfo, data, size);
    jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(cinfo, TRUE);
    return true;
}

bool read_pixels(jpeg_decompress_struct* cinfo, JpegErrors* errors, std::uint8_t* out, std::size_t row_bytes) {
    if (setjmp(errors->jump)) return false;
    jpeg_start_decompress(cinfo);
    while (cinfo->output_scanline < cinfo->output_height) {
        JSAMPROW row = out + cinfo->output_scanline * row_bytes;
        jpeg_read_scanlines(cinfo, &row, 1);
    }
    return true;
}

struct JpegHandle {
    jpeg_decompress_struct cinfo{};
    ~JpegHandle() { jpeg_destroy_decompress(&cinfo); }
};

// PIL's CMYK to RGB: each channel is (255 - k) less (255 - k) * c / 255, the product rounded like a division
// by 255 in integers.
std::uint8_t cmyk_channel(unsigned c, unsigned k) {
    const unsigned not_k = 255 - k;
    const unsigned product = c * not_k + 128;
    return static_cast<std::uint8_t>(not_k - (((product >> 8) + product) >> 8));
}

}  // namespace

DecodedImage decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name, std::uint64_t max_pixels) {
    auto fail = [&](const std::string& what) { return Error("image " + name + ": " + what); };
    JpegErrors errors{};
    JpegHandle handle;
    handle.cinfo.err = jpeg_std_error(&errors.manager);
    errors.manager.error_exit = on_error_exit;
    errors.manager.emit_message = on_message;
    jpeg_create_decompress(&handle.cinfo);
    jpeg_decompress_struct& cinfo = handle.cinfo;

    if (!read_header(&cinfo, &errors, bytes.data(), static_cast<unsigned long>(bytes.size())))
        throw fail(std::string("bad JPEG: ") + errors.message);
    const std::uint64_t pixels = std::uint64_t{cinfo.image_width} * cinfo.image_height;
    if (pixels > max_pixels)
        throw fail(std::to_string(cinfo.image_width) + "x" + std::to_string(cinfo.image_height) +
                   " is over the limit of " + std::to_string(max_pixels) + " pixels");
    int channels = 3;
    switch (cinfo.jpeg_color_space) {
        case JCS_GRAYSCALE: cinfo.out_color_space = JCS_GRAYSCALE; channels = 1; break;
        case JCS_CMYK:
        case JCS_YCCK: cinfo.out_color_space = JCS_CMYK; channels = 4; break;
        default: cinfo.out_color_space = JCS_RGB; break;
    }
    const std::size_t row_bytes = std::size_t{cinfo.image_width} * static_cast<std::size_t>(channels);
    std::vector<std::uint8_t> data(row_bytes * cinfo.image_height);
    if (!read_pixels(&cinfo, &errors, data.data(), row_bytes)) throw fail(std::string("bad JPEG: ") + errors.message);
    if (cinfo.output_width != cinfo.image_width || cinfo.output_height != cinfo.image_height ||
        cinfo.output_components != channels)
        throw fail("unexpected JPEG output layout");

    DecodedImage out;
    out.image.width = static_cast<int>(cinfo.image_width);
    out.image.height = static_cast<int>(cinfo.image_height);
    if (channels == 3) {
        out.image.rgb = std::move(data);
    } else {
        out.image.rgb.resize(pixels * 3);
        for (std::size_t i = 0; i < pixels; ++i) {
            if (channels == 1) {
                std::memset(&out.image.rgb[3 * i], data[i], 3);
                continue;
            }
            // PIL reads every CMYK JPEG as Adobe writes them, with inverted samples ("CMYK;I").
            const std::uint8_t* cmyk = &data[4 * i];
            const unsigned k = 255u - cmyk[3];
            for (std::size_t c = 0; c < 3; ++c) out.image.rgb[3 * i + c] = cmyk_channel(255u - cmyk[c], k);
        }
    }
    for (jpeg_saved_marker_ptr marker = cinfo.marker_list; marker; marker = marker->next) {
        const bool exif = marker->data_length > 6 && std::memcmp(marker->data, "Exif\0\0", 6) == 0;
        if (marker->marker == JPEG_APP0 + 1 && exif) {
            out.exif.assign(marker->data + 6, marker->data + marker->data_length);
            break;
        }
    }
    return out;
}

}  // namespace cellm::vision
