"""A camera's input transform: source image -> resize -> crop window = the network input.

A transform is written for one source image size. A camera of another size gets it scaled so
that the window keeps its angular place (same field of view, same network input size): the
resize is divided by the size ratio, and the window keeps its offset from the image centre in
resized pixels. For a camera of the same aspect ratio this is exact (a 1920x1080 camera with the
1600x900 rig's 0.44 gets 0.3667 and the same crop); for another aspect ratio the smaller ratio is
used, so the window still fits and the longer side loses its margin (``bevpool-inspect`` says
how much).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputTransform:
    """``resize`` then crop at (``crop_left``, ``crop_top``), for an ``image_width`` x
    ``image_height`` source image. Crop offsets are resized pixels."""

    resize: float
    crop_left: int
    crop_top: int
    image_width: int
    image_height: int

    @property
    def image_size(self) -> tuple[int, int]:
        return (self.image_width, self.image_height)

    def resized_size(self) -> tuple[int, int]:
        w, h = self.image_size
        return (int(round(w * self.resize)), int(round(h * self.resize)))

    def for_image(self, width: int, height: int, input_width: int,
                  input_height: int) -> "InputTransform":
        """This transform scaled to a ``width`` x ``height`` image (itself for its own size)."""
        if (width, height) == self.image_size:
            return self
        ratio = min(width / self.image_width, height / self.image_height)
        resize = self.resize / ratio

        def crop(offset: int, own: int, new: int, window: int) -> int:
            from_centre = offset + window / 2 - own * self.resize / 2  # resized px, kept as is
            c = int(round(new * resize / 2 + from_centre - window / 2))
            # rounding may push the window one pixel out of the resized image: keep it inside
            return min(max(c, 0), max(int(round(new * resize)) - window, 0))

        return InputTransform(resize, crop(self.crop_left, self.image_width, width, input_width),
                              crop(self.crop_top, self.image_height, height, input_height),
                              width, height)

    def source_window(self, input_width: int, input_height: int) -> tuple[float, ...]:
        """(left, top, right, bottom) of the network input in source pixels (BEVDet convention:
        source = (input + crop) / resize)."""
        left, top, r = self.crop_left, self.crop_top, self.resize
        return (left / r, top / r, (left + input_width) / r, (top + input_height) / r)

    def kept_fraction(self, input_width: int, input_height: int) -> tuple[float, float]:
        """Fraction of the source image's width and height that reaches the network."""
        left, top, right, bottom = self.source_window(input_width, input_height)
        w, h = self.image_size
        return ((min(right, w) - max(left, 0.0)) / w, (min(bottom, h) - max(top, 0.0)) / h)
