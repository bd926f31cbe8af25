"""DWARF's numbers: the tags, attributes, forms, operations and opcodes the reader knows, by their spec names.

Values from the DWARF 5 standard (dwarfstd.org, DWARF5.pdf, section 7),
with the GNU extensions gcc writes (``DW_AT_GNU_locviews``,
``DW_LLE_GNU_view_pair``, ``DW_OP_GNU_entry_value``...) from gcc's
``include/dwarf2.def``.  Only what kinstkit reads is here; an unknown tag or
attribute is skipped by its form, an unknown form or operation is an error
that names it.
"""

from __future__ import annotations

from typing import Dict

# -- unit types (7.5.1) ---------------------------------------------------------
DW_UT_compile = 0x01
DW_UT_type = 0x02
DW_UT_partial = 0x03
DW_UT_skeleton = 0x04
DW_UT_split_compile = 0x05
DW_UT_split_type = 0x06

# -- tags (7.5.3) -----------------------------------------------------------------
DW_TAG_array_type = 0x01
DW_TAG_class_type = 0x02
DW_TAG_enumeration_type = 0x04
DW_TAG_formal_parameter = 0x05
DW_TAG_label = 0x0A
DW_TAG_lexical_block = 0x0B
DW_TAG_member = 0x0D
DW_TAG_pointer_type = 0x0F
DW_TAG_reference_type = 0x10
DW_TAG_compile_unit = 0x11
DW_TAG_structure_type = 0x13
DW_TAG_subroutine_type = 0x15
DW_TAG_typedef = 0x16
DW_TAG_union_type = 0x17
DW_TAG_unspecified_parameters = 0x18
DW_TAG_inlined_subroutine = 0x1D
DW_TAG_subrange_type = 0x21
DW_TAG_base_type = 0x24
DW_TAG_const_type = 0x26
DW_TAG_enumerator = 0x28
DW_TAG_subprogram = 0x2E
DW_TAG_variable = 0x34
DW_TAG_volatile_type = 0x35
DW_TAG_restrict_type = 0x37
DW_TAG_namespace = 0x39
DW_TAG_module = 0x1E
DW_TAG_partial_unit = 0x3C
DW_TAG_unspecified_type = 0x3B
DW_TAG_atomic_type = 0x47
DW_TAG_call_site = 0x48
DW_TAG_call_site_parameter = 0x49
DW_TAG_skeleton_unit = 0x4A
DW_TAG_GNU_call_site = 0x4109
DW_TAG_GNU_call_site_parameter = 0x410A

# -- attributes (7.5.4) -----------------------------------------------------------
DW_AT_sibling = 0x01
DW_AT_location = 0x02
DW_AT_name = 0x03
DW_AT_byte_size = 0x0B
DW_AT_stmt_list = 0x10
DW_AT_low_pc = 0x11
DW_AT_high_pc = 0x12
DW_AT_language = 0x13
DW_AT_comp_dir = 0x1B
DW_AT_const_value = 0x1C
DW_AT_inline = 0x20
DW_AT_producer = 0x25
DW_AT_upper_bound = 0x2F
DW_AT_abstract_origin = 0x31
DW_AT_bit_size = 0x0D
DW_AT_count = 0x37
DW_AT_data_member_location = 0x38
DW_AT_decl_file = 0x3A
DW_AT_decl_line = 0x3B
DW_AT_declaration = 0x3C
DW_AT_encoding = 0x3E
DW_AT_external = 0x3F
DW_AT_frame_base = 0x40
DW_AT_specification = 0x47
DW_AT_type = 0x49
DW_AT_ranges = 0x55
DW_AT_entry_pc = 0x52
DW_AT_call_file = 0x58
DW_AT_call_line = 0x59
DW_AT_data_bit_offset = 0x6B
DW_AT_str_offsets_base = 0x72
DW_AT_addr_base = 0x73
DW_AT_rnglists_base = 0x74
DW_AT_loclists_base = 0x8C
DW_AT_GNU_locviews = 0x2137

# -- forms (7.5.6) ----------------------------------------------------------------
DW_FORM_addr = 0x01
DW_FORM_block2 = 0x03
DW_FORM_block4 = 0x04
DW_FORM_data2 = 0x05
DW_FORM_data4 = 0x06
DW_FORM_data8 = 0x07
DW_FORM_string = 0x08
DW_FORM_block = 0x09
DW_FORM_block1 = 0x0A
DW_FORM_data1 = 0x0B
DW_FORM_flag = 0x0C
DW_FORM_sdata = 0x0D
DW_FORM_strp = 0x0E
DW_FORM_udata = 0x0F
DW_FORM_ref_addr = 0x10
DW_FORM_ref1 = 0x11
DW_FORM_ref2 = 0x12
DW_FORM_ref4 = 0x13
DW_FORM_ref8 = 0x14
DW_FORM_ref_udata = 0x15
DW_FORM_indirect = 0x16
DW_FORM_sec_offset = 0x17
DW_FORM_exprloc = 0x18
DW_FORM_flag_present = 0x19
DW_FORM_strx = 0x1A
DW_FORM_addrx = 0x1B
DW_FORM_ref_sup4 = 0x1C
DW_FORM_strp_sup = 0x1D
DW_FORM_data16 = 0x1E
DW_FORM_line_strp = 0x1F
DW_FORM_ref_sig8 = 0x20
DW_FORM_implicit_const = 0x21
DW_FORM_loclistx = 0x22
DW_FORM_rnglistx = 0x23
DW_FORM_ref_sup8 = 0x24
DW_FORM_strx1 = 0x25
DW_FORM_strx2 = 0x26
DW_FORM_strx3 = 0x27
DW_FORM_strx4 = 0x28
DW_FORM_addrx1 = 0x29
DW_FORM_addrx2 = 0x2A
DW_FORM_addrx3 = 0x2B
DW_FORM_addrx4 = 0x2C
DW_FORM_GNU_addr_index = 0x1F01
DW_FORM_GNU_str_index = 0x1F02
DW_FORM_GNU_ref_alt = 0x1F20
DW_FORM_GNU_strp_alt = 0x1F21

# Forms whose value is a reference into the same unit (an offset from the unit's start).
UNIT_REFS = frozenset((DW_FORM_ref1, DW_FORM_ref2, DW_FORM_ref4, DW_FORM_ref8, DW_FORM_ref_udata))
# Forms whose value is a constant (DW_AT_high_pc in one of them is a length).
CONSTANTS = frozenset((DW_FORM_data1, DW_FORM_data2, DW_FORM_data4, DW_FORM_data8, DW_FORM_udata, DW_FORM_sdata,
                       DW_FORM_implicit_const))
# Forms that are strings, by where the text is.
STRINGS = frozenset((DW_FORM_string, DW_FORM_strp, DW_FORM_line_strp, DW_FORM_strx, DW_FORM_strx1, DW_FORM_strx2,
                     DW_FORM_strx3, DW_FORM_strx4, DW_FORM_GNU_str_index))
# Forms that hold a DWARF expression or a block of bytes.
BLOCKS = frozenset((DW_FORM_exprloc, DW_FORM_block, DW_FORM_block1, DW_FORM_block2, DW_FORM_block4))

FORM_NAMES: Dict[int, str] = {v: k for k, v in globals().items() if k.startswith("DW_FORM_") and isinstance(v, int)}
TAG_NAMES: Dict[int, str] = {v: k for k, v in globals().items() if k.startswith("DW_TAG_") and isinstance(v, int)}

# -- inline codes (7.5.6 DW_AT_inline) ----------------------------------------------
DW_INL_inlined = 1
DW_INL_declared_inlined = 3

# -- base type encodings (7.8) ------------------------------------------------------
DW_ATE_address = 0x01
DW_ATE_boolean = 0x02
DW_ATE_float = 0x04
DW_ATE_signed = 0x05
DW_ATE_signed_char = 0x06
DW_ATE_unsigned = 0x07
DW_ATE_unsigned_char = 0x08
DW_ATE_UTF = 0x10

# -- line number program (6.2.5) ----------------------------------------------------
DW_LNS_copy = 0x01
DW_LNS_advance_pc = 0x02
DW_LNS_advance_line = 0x03
DW_LNS_set_file = 0x04
DW_LNS_set_column = 0x05
DW_LNS_negate_stmt = 0x06
DW_LNS_set_basic_block = 0x07
DW_LNS_const_add_pc = 0x08
DW_LNS_fixed_advance_pc = 0x09
DW_LNS_set_prologue_end = 0x0A
DW_LNS_set_epilogue_begin = 0x0B
DW_LNS_set_isa = 0x0C
DW_LNE_end_sequence = 0x01
DW_LNE_set_address = 0x02
DW_LNE_define_file = 0x03
DW_LNE_set_discriminator = 0x04
DW_LNCT_path = 0x1
DW_LNCT_directory_index = 0x2

# -- range and location list entries (7.25, 7.29) -----------------------------------
DW_RLE_end_of_list = 0x00
DW_RLE_base_addressx = 0x01
DW_RLE_startx_endx = 0x02
DW_RLE_startx_length = 0x03
DW_RLE_offset_pair = 0x04
DW_RLE_base_address = 0x05
DW_RLE_start_end = 0x06
DW_RLE_start_length = 0x07
DW_LLE_end_of_list = 0x00
DW_LLE_base_addressx = 0x01
DW_LLE_startx_endx = 0x02
DW_LLE_startx_length = 0x03
DW_LLE_offset_pair = 0x04
DW_LLE_default_location = 0x05
DW_LLE_base_address = 0x06
DW_LLE_start_end = 0x07
DW_LLE_start_length = 0x08
DW_LLE_GNU_view_pair = 0x09

# -- call frame instructions (6.4.2) ------------------------------------------------
DW_CFA_advance_loc = 0x40  # high two bits; low six: the delta
DW_CFA_offset = 0x80
DW_CFA_restore = 0xC0
DW_CFA_nop = 0x00
DW_CFA_set_loc = 0x01
DW_CFA_advance_loc1 = 0x02
DW_CFA_advance_loc2 = 0x03
DW_CFA_advance_loc4 = 0x04
DW_CFA_offset_extended = 0x05
DW_CFA_restore_extended = 0x06
DW_CFA_undefined = 0x07
DW_CFA_same_value = 0x08
DW_CFA_register = 0x09
DW_CFA_remember_state = 0x0A
DW_CFA_restore_state = 0x0B
DW_CFA_def_cfa = 0x0C
DW_CFA_def_cfa_register = 0x0D
DW_CFA_def_cfa_offset = 0x0E
DW_CFA_def_cfa_expression = 0x0F
DW_CFA_expression = 0x10
DW_CFA_offset_extended_sf = 0x11
DW_CFA_def_cfa_sf = 0x12
DW_CFA_def_cfa_offset_sf = 0x13
DW_CFA_val_offset = 0x14
DW_CFA_val_offset_sf = 0x15
DW_CFA_val_expression = 0x16
DW_CFA_GNU_args_size = 0x2E
DW_CFA_GNU_negative_offset_extended = 0x2F
