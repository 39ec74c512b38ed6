"""RDMA netlink messages (dradriver/kernel/rdmanl.py) against byte vectors derived by hand.

From include/uapi/rdma/rdma_netlink.h (checked with the C header on this machine):
RDMA_NL_NLDEV = 5, RDMA_NL_GET_TYPE(client, op) = (client << 10) + op, so
RDMA_NLDEV_CMD_GET (1) is 5121 = 0x1401, _SET (2) 0x1402, _SYS_GET (6) 0x1406;
RDMA_NLDEV_ATTR_DEV_INDEX = 1 (u32), _DEV_NAME = 2 (string),
RDMA_NLDEV_SYS_ATTR_NETNS_MODE = 66 = 0x42 (u8; 1 shared, 0 exclusive),
RDMA_NLDEV_NET_NS_FD = 68 = 0x44 (u32). A netlink header is len u32, type u16, flags
u16, seq u32, pid u32 in host order (little-endian here); an attribute is len u16 (header
included, before padding), type u16, the value, padded to 4 bytes.
"""

from __future__ import annotations

import errno
import sys

import pytest

from dradriver.kernel import rdmanl

pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="vectors are little-endian")


def test_moving_a_device_into_a_namespace_is_one_set_request():
    got = rdmanl.set_netns_request(index=3, netns_fd=7, seq=3)
    want = bytes.fromhex(
        "20000000"  # length 32: 16 of header, two attributes of 8
        "0214"  # type 0x1402: nldev SET
        "0500"  # NLM_F_REQUEST | NLM_F_ACK
        "03000000"  # seq 3
        "00000000"  # pid 0: the kernel
        "0800" "0100" "03000000"  # DEV_INDEX = 3
        "0800" "4400" "07000000"  # NET_NS_FD = 7
    )  # fmt: skip
    assert got == want


def test_a_dump_of_devices_and_its_answer():
    assert rdmanl.encode(rdmanl.RDMA_NLDEV_CMD_GET, 0x301, 1) == bytes.fromhex(
        "10000000" "0114" "0103" "01000000" "00000000"  # GET, REQUEST | DUMP, seq 1
    )  # fmt: skip
    answer = bytes.fromhex(
        # one device: header (len 16 + 8 + 12 = 36, type 0x1401, NLM_F_MULTI, seq 1),
        # index 0, name "rxe0"
        "24000000" "0114" "0200" "01000000" "00000000"
        "0800" "0100" "00000000"
        "0900" "0200" "72786530" "00" "000000"  # "rxe0\0", padded to 12
        # NLMSG_DONE
        "14000000" "0300" "0200" "01000000" "00000000" "00000000"
    )  # fmt: skip
    [device, done] = list(rdmanl.messages(answer))
    assert device.attrs[rdmanl.RDMA_NLDEV_ATTR_DEV_NAME] == b"rxe0\0"
    assert device.attrs[rdmanl.RDMA_NLDEV_ATTR_DEV_INDEX] == b"\0\0\0\0"
    assert done.type == rdmanl.NLMSG_DONE


def test_the_netns_mode_and_an_error_answer():
    sys_get = rdmanl.encode(rdmanl.RDMA_NLDEV_CMD_SYS_GET, rdmanl.NLM_F_REQUEST, 2)
    assert sys_get[4:6] == bytes.fromhex("0614")
    answer = bytes.fromhex(
        "18000000" "0614" "0000" "02000000" "00000000"
        "0500" "4200" "00" "000000"  # NETNS_MODE = 0: exclusive
    )  # fmt: skip
    [msg] = list(rdmanl.messages(answer))
    assert msg.attrs[rdmanl.RDMA_NLDEV_SYS_ATTR_NETNS_MODE] == b"\0"
    refused = bytes.fromhex(
        "24000000" "0200" "0000" "03000000" "00000000"  # NLMSG_ERROR
        "a1ffffff"  # -95: EOPNOTSUPP (a device that cannot change namespace)
        "20000000" "0214" "0500" "03000000" "00000000"  # the request's header
    )  # fmt: skip
    [err] = list(rdmanl.messages(refused))
    assert (err.type, err.error) == (rdmanl.NLMSG_ERROR, errno.EOPNOTSUPP)


def test_truncated_or_bad_lengths_are_not_read_past():
    assert list(rdmanl.messages(b"\x20\x00\x00\x00\x01")) == []
    assert rdmanl.attributes(bytes.fromhex("02000100ffff")) == {}
    assert rdmanl.attributes(bytes.fromhex("0c0001000000")) == {}
