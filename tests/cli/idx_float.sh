# `amp train` on IDX images stored as float32 (type 0x0D) and float64 (0x0E): they train, and a NaN or
# an infinity in either file stops the run before training with exit status 2 and one line naming the
# file, the image and the pixel. The files are written here with printf.
. "$(dirname "$0")/lib.sh"

# bytes HEX...: the bytes given as two-digit hex numbers.
bytes() { for b in "$@"; do printf "\\$(printf %o "0x$b")"; done; }
# Big-endian encodings of the few values used (IEEE 754).
f32() { case $1 in 0) bytes 00 00 00 00 ;; 1) bytes 3f 80 00 00 ;; nan) bytes 7f c0 00 00 ;; inf) bytes 7f 80 00 00 ;; esac; }
f64() { case $1 in 0) bytes 00 00 00 00 00 00 00 00 ;; 1) bytes 3f f0 00 00 00 00 00 00 ;;
        nan) bytes 7f f8 00 00 00 00 00 00 ;; inf) bytes 7f f0 00 00 00 00 00 00 ;; esac; }

# float_pair DIR PREFIX TYPE(f32|f64) [BAD_IMAGE BAD_PIXEL VALUE]: 8 images of 2x2, label i % 2, image i
# bright (1) in pixel (i % 2) and 0 elsewhere; pixel BAD_PIXEL of image BAD_IMAGE set to VALUE.
float_pair() {
    mkdir -p "$1"
    code=0d; [ "$3" = f64 ] && code=0e
    { bytes 00 00 "$code" 03; be32 8; be32 2; be32 2
      i=0
      while [ $i -lt 8 ]; do
          p=0
          while [ $p -lt 4 ]; do
              v=0; [ $p = $((i % 2)) ] && v=1
              [ "$i" = "${4:-}" ] && [ "$p" = "${5:-}" ] && v=$6
              "$3" $v
              p=$((p + 1))
          done
          i=$((i + 1))
      done; } >"$1/$2-images-idx3-ubyte"
    { bytes 00 00 08 01; be32 8; bytes 00 01 00 01 00 01 00 01; } >"$1/$2-labels-idx1-ubyte"
}

train_on() { run "$AMP" train --model mlp --data "$1" --steps 2 --batch 4 --hidden 8 --threads 1 --json; }

for t in f32 f64; do
    float_pair "$TMP/$t" train $t
    float_pair "$TMP/$t" t10k $t
    train_on "$TMP/$t"
    expect_rc 0 "$t images train"
    expect_json_eq '.steps' '2' "$t images: two steps"
done

float_pair "$TMP/nan" train f32 3 1 nan
float_pair "$TMP/nan" t10k f32
train_on "$TMP/nan"
expect_rc 2 "NaN in float32 training images"
expect_err_has "$TMP/nan/train-images-idx3-ubyte: image 3, pixel 1: non-finite value (nan)" "NaN: file, image, pixel"
expect_err_lines 1 "NaN: one line"

float_pair "$TMP/inf" train f64
float_pair "$TMP/inf" t10k f64 0 0 inf
train_on "$TMP/inf"
expect_rc 2 "inf in float64 test images"
expect_err_has "$TMP/inf/t10k-images-idx3-ubyte: image 0, pixel 0: non-finite value (inf)" "inf: file, image, pixel"
expect_err_lines 1 "inf: one line"

finish
