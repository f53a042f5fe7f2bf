"""F15: torch.finfo(torch.float8_e5m2fnuz).eps is 0.125; the format's epsilon is 0.25.

finfo's eps is the gap from 1 to the next value of the dtype. float8_e5m2fnuz has two mantissa
bits (as float8_e5m2), so the value after 1.0 is 1.25; torch reports 0.125, and 1 + 0.125 rounds
back to 1.0 in the format. c10's numeric_limits<Float8_e5m2fnuz>::epsilon() returns the bits 0x34,
e5m2's epsilon bits, which with fnuz's exponent bias of 16 (e5m2's is 15) mean 2**-3, not 2**-2
(round_error() is off by the same factor). Code that reads eps to decide whether a dtype holds
another exactly (the narrowest wire a bucket of mixed dtypes may pack in) takes e5m2fnuz for a
holder of e4m3fnuz, which has three mantissa bits, and rounds its values.
Imports only torch. Exit 1: reproduced; 0: not.
"""
import sys

import torch


def main() -> int:
    dtype = torch.float8_e5m2fnuz
    eps = torch.finfo(dtype).eps
    after_one = torch.tensor(1.0 + eps, dtype=torch.float64).to(dtype).item()
    following = min(value for value in (torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
                                        .to(torch.float64).tolist()) if value > 1.0)
    print(f"torch.finfo({dtype}).eps = {eps}; 1 + eps in {dtype} is {after_one}; the value after 1.0 is {following}")
    e4m3 = torch.tensor([1.125], dtype=torch.float8_e4m3fnuz)
    print(f"a float8_e4m3fnuz 1.125 through {dtype} comes back as {e4m3.to(dtype).to(e4m3.dtype).item()}")
    if after_one == 1.0:
        print(f"REPRODUCED: finfo says {eps}, but 1 + {eps} rounds to 1.0; the epsilon is {following - 1.0}")
        return 1
    print("NOT REPRODUCED: 1 + eps is the value after 1.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
