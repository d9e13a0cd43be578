/* stoker-augment `turbo` feature: region-of-interest and DCT-scaled JPEG decode
 * through libjpeg-turbo's libjpeg API (jpeg_skip_scanlines, jpeg_crop_scanline,
 * scale_num / scale_denom).
 *
 * Every libjpeg call happens inside one of the functions below, each of which sets
 * its own setjmp point; the error manager's error_exit longjmps back there, so an
 * error in libjpeg never calls exit() and never unwinds through Rust frames. The
 * decompress object is reused across images (jpeg_abort_decompress between them).
 *
 * Return codes: 0 ok, -1 error (text in stoker_jpeg_message), 1 unsupported input
 * (the caller falls back to its own decoder). */

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 1005000
#error "stoker turbo feature needs libjpeg-turbo 1.5 or newer (jpeg_crop_scanline)"
#endif

/* A progressive file may hold any number of scans, each a pass over the whole
 * coefficient buffer; libjpeg-turbo advises a cap against crafted files. */
#define STOKER_MAX_SCANS 1000

/* The work after each setjmp lives in a separate function, so that no local of the
 * function that called setjmp is live across a longjmp. */
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

typedef struct stoker_jpeg {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr err;
  struct jpeg_progress_mgr progress;
  jmp_buf jump;
  int active; /* a decompression is in progress and must be aborted */
  long short_data; /* warnings that the entropy-coded data ended early */
  char message[JMSG_LENGTH_MAX + 32];
} stoker_jpeg;

static void stoker_error_exit(j_common_ptr cinfo) {
  stoker_jpeg *s = (stoker_jpeg *)cinfo->client_data;
  (*cinfo->err->format_message)(cinfo, s->message);
  longjmp(s->jump, 1);
}

/* Warnings (corrupt but decodable data) are counted, and those that say the data of
 * a scan ended early (a cut file: the rest of the image would be filled in grey) are
 * counted apart; the caller decides. Trace messages are dropped. Nothing is printed. */
static void stoker_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) {
    cinfo->err->num_warnings++;
    if (cinfo->err->msg_code == JWRN_HIT_MARKER || cinfo->err->msg_code == JWRN_JPEG_EOF) {
      ((stoker_jpeg *)cinfo->client_data)->short_data++;
    }
  }
}

static void stoker_progress(j_common_ptr cinfo) {
  j_decompress_ptr d = (j_decompress_ptr)cinfo;
  if (d->is_decompressor && d->input_scan_number > STOKER_MAX_SCANS) {
    stoker_jpeg *s = (stoker_jpeg *)cinfo->client_data;
    snprintf(s->message, sizeof s->message, "more than %d progressive scans",
             STOKER_MAX_SCANS);
    longjmp(s->jump, 1);
  }
}

long stoker_jpeg_warnings(const stoker_jpeg *s) { return s->err.num_warnings; }

long stoker_jpeg_short_data(const stoker_jpeg *s) { return s->short_data; }

const char *stoker_jpeg_message(const stoker_jpeg *s) { return s->message; }

/* Returns NULL when out of memory or when the library refuses the object (a header
 * and library of different ABI versions); `message` in the latter case is lost, so
 * the caller reports a generic failure. */
static NOINLINE int create_body(stoker_jpeg *s) {
  jpeg_create_decompress(&s->cinfo);
  s->progress.progress_monitor = stoker_progress;
  s->cinfo.progress = &s->progress;
  return 0;
}

static int create(stoker_jpeg *s) {
  if (setjmp(s->jump)) {
    return -1;
  }
  return create_body(s);
}

stoker_jpeg *stoker_jpeg_new(void) {
  stoker_jpeg *s = (stoker_jpeg *)calloc(1, sizeof(stoker_jpeg));
  if (s == NULL) {
    return NULL;
  }
  s->cinfo.err = jpeg_std_error(&s->err);
  s->err.error_exit = stoker_error_exit;
  s->err.emit_message = stoker_emit_message;
  s->cinfo.client_data = s;
  if (create(s) != 0) {
    jpeg_destroy_decompress(&s->cinfo);
    free(s);
    return NULL;
  }
  return s;
}

void stoker_jpeg_free(stoker_jpeg *s) {
  if (s != NULL) {
    jpeg_destroy_decompress(&s->cinfo);
    free(s);
  }
}

/* Leave the object ready for the next image, whatever state it is in. */
static void stoker_reset(stoker_jpeg *s) {
  if (s->active) {
    jpeg_abort_decompress(&s->cinfo);
    s->active = 0;
  }
}

/* Abandon the image in progress, if any (the caller drops its borrow of the data). */
void stoker_jpeg_abort(stoker_jpeg *s) { stoker_reset(s); }

/* Read the header of `data` (which must stay alive until stoker_jpeg_rows or
 * stoker_jpeg_abort ends the image) and
 * report the full size. The number of warnings so far is in stoker_jpeg_warnings. */
static NOINLINE int header_body(stoker_jpeg *s, const uint8_t *data, size_t len,
                       uint32_t *width, uint32_t *height) {
  s->active = 1;
  s->err.num_warnings = 0;
  s->short_data = 0;
  jpeg_mem_src(&s->cinfo, data, (unsigned long)len);
  jpeg_read_header(&s->cinfo, TRUE);
  switch (s->cinfo.jpeg_color_space) {
  case JCS_GRAYSCALE:
  case JCS_YCbCr:
  case JCS_RGB:
    break;
  default:
    /* CMYK / YCCK: libjpeg cannot make RGB of them. */
    snprintf(s->message, sizeof s->message, "colour space %d not handled",
             (int)s->cinfo.jpeg_color_space);
    stoker_reset(s);
    return 1;
  }
  *width = s->cinfo.image_width;
  *height = s->cinfo.image_height;
  return 0;
}

int stoker_jpeg_header(stoker_jpeg *s, const uint8_t *data, size_t len,
                       uint32_t *width, uint32_t *height) {
  stoker_reset(s);
  s->message[0] = 0;
  if (setjmp(s->jump)) {
    stoker_reset(s);
    return -1;
  }
  return header_body(s, data, len, width, height);
}

/* What stoker_jpeg_start_window_px produced: the columns [got_x, got_x + got_w) of
 * the scaled output, which is out_width x out_height. (One struct rather than four
 * out-pointers; the function was renamed when this changed, so that a stale build
 * of either side fails to link instead of passing the wrong arguments.) */
typedef struct stoker_window {
  uint32_t got_x;
  uint32_t got_w;
  uint32_t out_width;
  uint32_t out_height;
} stoker_window;

/* After stoker_jpeg_header: start a decode at scale 1/denom (1, 2, 4, 8) into
 * `pixel` bytes a pixel (3: RGB; 4: RGBX, the same colour conversion with a fourth
 * byte, which a four-channel resampler reads faster) and keep only columns
 * [x, x + w) of the scaled output. libjpeg widens the window to iMCU boundaries: the
 * columns actually produced are [got->got_x, got->got_x + got->got_w).
 * got->out_height is the scaled height. (Renamed from stoker_jpeg_start_window when
 * `pixel` was added, so that a stale build of either side fails to link.) */
static NOINLINE int start_body(stoker_jpeg *s, uint32_t denom, uint32_t pixel, uint32_t x,
                      uint32_t w, stoker_window *got) {
  if (pixel != 3 && pixel != 4) {
    snprintf(s->message, sizeof s->message, "no %u-byte pixels", pixel);
    stoker_reset(s);
    return -1;
  }
  s->cinfo.out_color_space = pixel == 4 ? JCS_EXT_RGBX : JCS_RGB;
  s->cinfo.scale_num = 1;
  s->cinfo.scale_denom = denom;
  s->cinfo.dct_method = JDCT_ISLOW;
  s->cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&s->cinfo);
  got->out_width = s->cinfo.output_width;
  got->out_height = s->cinfo.output_height;
  if (s->cinfo.output_components != (int)pixel) {
    snprintf(s->message, sizeof s->message, "decoder gives %d components",
             s->cinfo.output_components);
    stoker_reset(s);
    return -1;
  }
  if (x >= s->cinfo.output_width || w == 0 || w > s->cinfo.output_width - x) {
    snprintf(s->message, sizeof s->message,
             "window %u+%u outside the scaled width %u", x, w,
             s->cinfo.output_width);
    stoker_reset(s);
    return -1;
  }
  JDIMENSION cx = x, cw = w;
  if (cw < s->cinfo.output_width) {
    jpeg_crop_scanline(&s->cinfo, &cx, &cw);
  }
  got->got_x = cx;
  got->got_w = cw;
  return 0;
}

int stoker_jpeg_start_window_px(stoker_jpeg *s, uint32_t denom, uint32_t pixel,
                                uint32_t x, uint32_t w, stoker_window *got) {
  if (!s->active) {
    snprintf(s->message, sizeof s->message, "no header read");
    return -1;
  }
  if (setjmp(s->jump)) {
    stoker_reset(s);
    return -1;
  }
  return start_body(s, denom, pixel, x, w, got);
}

/* After stoker_jpeg_start_window_px: skip `y` scanlines, then read `h` rows of
 * got_w pixels into `out` (which holds `out_len` bytes), and end this image. */
static NOINLINE int rows_body(stoker_jpeg *s, uint32_t y, uint32_t h, uint8_t *out,
                     size_t out_len) {
  size_t stride = (size_t)s->cinfo.output_width * s->cinfo.output_components;
  if (y > s->cinfo.output_height || h > s->cinfo.output_height - y ||
      out_len / (stride ? stride : 1) < h) {
    snprintf(s->message, sizeof s->message, "rows %u+%u do not fit", y, h);
    stoker_reset(s);
    return -1;
  }
  if (y > 0 && jpeg_skip_scanlines(&s->cinfo, y) != y) {
    snprintf(s->message, sizeof s->message, "could not skip %u rows", y);
    stoker_reset(s);
    return -1;
  }
  uint32_t done = 0;
  while (done < h) {
    /* Up to 16 rows per call: libjpeg fills as many as one iMCU row gives. */
    JSAMPROW rows[16];
    uint32_t want = h - done < 16 ? h - done : 16;
    for (uint32_t i = 0; i < want; i++) {
      rows[i] = out + (size_t)(done + i) * stride;
    }
    JDIMENSION got = jpeg_read_scanlines(&s->cinfo, rows, want);
    if (got == 0) {
      snprintf(s->message, sizeof s->message, "no data after row %u", y + done);
      stoker_reset(s);
      return -1;
    }
    done += got;
  }
  /* The rows below the window are never decoded. */
  stoker_reset(s);
  return 0;
}

int stoker_jpeg_rows(stoker_jpeg *s, uint32_t y, uint32_t h, uint8_t *out,
                     size_t out_len) {
  if (!s->active) {
    snprintf(s->message, sizeof s->message, "decode not started");
    return -1;
  }
  if (setjmp(s->jump)) {
    stoker_reset(s);
    return -1;
  }
  return rows_body(s, y, h, out, out_len);
}

/* The libjpeg-turbo version the shim was compiled against, e.g. 2001005 for 2.1.5. */
long stoker_jpeg_turbo_version(void) {
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
  return LIBJPEG_TURBO_VERSION_NUMBER;
#else
  return 0;
#endif
}
