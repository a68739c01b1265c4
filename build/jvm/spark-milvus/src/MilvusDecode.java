package deltanode.bench;

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.WireFormat;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * Milvus's msgstream messages read in Spark's JVM: the two UDFs of the Structured Streaming
 * reference's "jvm" decode form (build/deltanode_bench/structured_streaming.py registers them and
 * declares their return types). Field numbers are milvus-proto's (common.proto, msg.proto,
 * schema.proto); a field of an unexpected wire type is skipped, as protobuf's parsers do, and a
 * message that does not parse gives null, which the query drops.
 */
public final class MilvusDecode {
  private MilvusDecode() {}

  private static final int VARINT = WireFormat.WIRETYPE_VARINT;
  private static final int LEN = WireFormat.WIRETYPE_LENGTH_DELIMITED;

  /** struct&lt;msg_type int, shard string&gt;: MsgBase.msg_type and field 2 (an insert's shardName). */
  public static final class Header implements UDF1<byte[], Row> {
    @Override
    public Row call(byte[] value) {
      if (value == null) {
        return null;
      }
      try {
        CodedInputStream in = CodedInputStream.newInstance(value);
        int type = -1;
        String shard = null;
        for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
          int number = WireFormat.getTagFieldNumber(tag);
          if (number == 1 && WireFormat.getTagWireType(tag) == LEN) {
            type = msgType(in);
          } else if (number == 2 && WireFormat.getTagWireType(tag) == LEN) {
            shard = in.readStringRequireUtf8();
          } else {
            in.skipField(tag);
          }
        }
        return RowFactory.create(type, shard);
      } catch (IOException e) {
        return null;
      }
    }
  }

  /**
   * An InsertRequest's columns: struct&lt;shard, partition, segment, ts array&lt;long&gt;,
   * row_ids array&lt;long&gt;, fields array&lt;struct&lt;id, name, dim, longs, ints, floats,
   * doubles, bools, strings, bytes, vectors&gt;&gt;&gt;, each FieldData's values in the array of
   * its type; a FloatVector's as one array of dim floats a row (the query zips the fields' arrays
   * into rows, which a flat array cut per row in Spark SQL makes several times slower).
   */
  public static final class Insert implements UDF1<byte[], Row> {
    @Override
    public Row call(byte[] value) {
      if (value == null) {
        return null;
      }
      try {
        return insert(CodedInputStream.newInstance(value));
      } catch (IOException e) {
        return null;
      }
    }
  }

  private static int msgType(CodedInputStream in) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    int type = -1;
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      if (WireFormat.getTagFieldNumber(tag) == 1 && WireFormat.getTagWireType(tag) == VARINT) {
        type = in.readEnum();
      } else {
        in.skipField(tag);
      }
    }
    in.popLimit(limit);
    return type;
  }

  private static Row insert(CodedInputStream in) throws IOException {
    String shard = null;
    long partition = 0;
    long segment = 0;
    Longs ts = new Longs();
    Longs rowIds = new Longs();
    List<Row> fields = new ArrayList<>();
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      int number = WireFormat.getTagFieldNumber(tag);
      int wire = WireFormat.getTagWireType(tag);
      if (number == 2 && wire == LEN) {
        shard = in.readStringRequireUtf8();
      } else if (number == 8 && wire == VARINT) {
        partition = in.readInt64();
      } else if (number == 9 && wire == VARINT) {
        segment = in.readInt64();
      } else if (number == 10) {
        ts.read(in, wire);
      } else if (number == 11) {
        rowIds.read(in, wire);
      } else if (number == 13 && wire == LEN) {
        fields.add(fieldData(in));
      } else {
        in.skipField(tag);
      }
    }
    return RowFactory.create(shard, partition, segment, ts.toArray(), rowIds.toArray(), fields.toArray());
  }

  /** A FieldData: its id and name, a vector's dim, and its values (scalars or a vector's flat floats). */
  private static final class Field {
    long id;
    String name;
    long dim;
    long[] longs;
    int[] ints;
    float[] floats;
    double[] doubles;
    boolean[] bools;
    String[] strings;
    byte[][] bytes;
    float[][] vectors;

    Row row() {
      return RowFactory.create(id, name, dim, longs, ints, floats, doubles, bools, strings, bytes, vectors);
    }
  }

  private static Row fieldData(CodedInputStream in) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    Field f = new Field();
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      int number = WireFormat.getTagFieldNumber(tag);
      int wire = WireFormat.getTagWireType(tag);
      if (number == 2 && wire == LEN) {
        f.name = in.readStringRequireUtf8();
      } else if (number == 3 && wire == LEN) {
        scalars(in, f);
      } else if (number == 4 && wire == LEN) {
        vectors(in, f);
      } else if (number == 5 && wire == VARINT) {
        f.id = in.readInt64();
      } else {
        in.skipField(tag);
      }
    }
    in.popLimit(limit);
    return f.row();
  }

  /** ScalarField: one of bool (1), int (2), long (3), float (4), double (5), string (6), bytes (7), JSON (9). */
  private static void scalars(CodedInputStream in, Field f) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      if (WireFormat.getTagWireType(tag) != LEN) {
        in.skipField(tag);
        continue;
      }
      switch (WireFormat.getTagFieldNumber(tag)) {
        case 1 -> f.bools = bools(in);
        case 2 -> f.ints = ints(in);
        case 3 -> f.longs = longs(in);
        case 4 -> f.floats = floats(in);
        case 5 -> f.doubles = doubles(in);
        case 6 -> f.strings = strings(in);
        case 7, 9 -> f.bytes = bytes(in);
        default -> in.skipField(tag);
      }
    }
    in.popLimit(limit);
  }

  /**
   * VectorField: dim (1) and a FloatVector's values (2), cut into rows of dim; other vector types
   * are not read. Values that are not whole rows give no rows (null), which the query rejects.
   */
  private static void vectors(CodedInputStream in, Field f) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    float[] flat = null;
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      int number = WireFormat.getTagFieldNumber(tag);
      int wire = WireFormat.getTagWireType(tag);
      if (number == 1 && wire == VARINT) {
        f.dim = in.readInt64();
      } else if (number == 2 && wire == LEN) {
        flat = floats(in);
      } else {
        in.skipField(tag);
      }
    }
    in.popLimit(limit);
    if (flat != null && f.dim > 0 && flat.length % f.dim == 0) {
      int dim = (int) f.dim;
      f.vectors = new float[flat.length / dim][];
      for (int i = 0; i < f.vectors.length; i++) {
        f.vectors[i] = Arrays.copyOfRange(flat, i * dim, (i + 1) * dim);
      }
    }
  }

  // The *Array messages of schema.proto: one repeated field "data" (1), packed or not.

  private static long[] longs(CodedInputStream in) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    Longs out = new Longs();
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      if (WireFormat.getTagFieldNumber(tag) == 1) {
        out.read(in, WireFormat.getTagWireType(tag));
      } else {
        in.skipField(tag);
      }
    }
    in.popLimit(limit);
    return out.toArray();
  }

  private static int[] ints(CodedInputStream in) throws IOException {
    long[] wide = longs(in);
    int[] out = new int[wide.length];
    for (int i = 0; i < wide.length; i++) {
      out[i] = (int) wide[i];
    }
    return out;
  }

  private static boolean[] bools(CodedInputStream in) throws IOException {
    long[] wide = longs(in);
    boolean[] out = new boolean[wide.length];
    for (int i = 0; i < wide.length; i++) {
      out[i] = wide[i] != 0;
    }
    return out;
  }

  private static float[] floats(CodedInputStream in) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    float[] out = new float[0];
    int n = 0;
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      if (WireFormat.getTagFieldNumber(tag) != 1) {
        in.skipField(tag);
      } else if (WireFormat.getTagWireType(tag) == LEN) {
        int bytes = in.readRawVarint32();
        out = Arrays.copyOf(out, n + bytes / 4);
        for (int end = n + bytes / 4; n < end; n++) {
          out[n] = in.readFloat();
        }
      } else {
        out = Arrays.copyOf(out, n + 1);
        out[n++] = in.readFloat();
      }
    }
    in.popLimit(limit);
    return out;
  }

  private static double[] doubles(CodedInputStream in) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    double[] out = new double[0];
    int n = 0;
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      if (WireFormat.getTagFieldNumber(tag) != 1) {
        in.skipField(tag);
      } else if (WireFormat.getTagWireType(tag) == LEN) {
        int bytes = in.readRawVarint32();
        out = Arrays.copyOf(out, n + bytes / 8);
        for (int end = n + bytes / 8; n < end; n++) {
          out[n] = in.readDouble();
        }
      } else {
        out = Arrays.copyOf(out, n + 1);
        out[n++] = in.readDouble();
      }
    }
    in.popLimit(limit);
    return out;
  }

  private static String[] strings(CodedInputStream in) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    List<String> out = new ArrayList<>();
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      if (WireFormat.getTagFieldNumber(tag) == 1 && WireFormat.getTagWireType(tag) == LEN) {
        out.add(in.readStringRequireUtf8());
      } else {
        in.skipField(tag);
      }
    }
    in.popLimit(limit);
    return out.toArray(new String[0]);
  }

  private static byte[][] bytes(CodedInputStream in) throws IOException {
    int limit = in.pushLimit(in.readRawVarint32());
    List<byte[]> out = new ArrayList<>();
    for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
      if (WireFormat.getTagFieldNumber(tag) == 1 && WireFormat.getTagWireType(tag) == LEN) {
        out.add(in.readByteArray());
      } else {
        in.skipField(tag);
      }
    }
    in.popLimit(limit);
    return out.toArray(new byte[0][]);
  }

  /** A growing long[]: repeated varints (int64, uint64, int32, bool, enum), packed or one a tag. */
  private static final class Longs {
    long[] values = new long[16];
    int n;

    void read(CodedInputStream in, int wire) throws IOException {
      if (wire == LEN) {
        int limit = in.pushLimit(in.readRawVarint32());
        while (!in.isAtEnd()) {
          add(in.readRawVarint64());
        }
        in.popLimit(limit);
      } else if (wire == VARINT) {
        add(in.readRawVarint64());
      } else {
        throw new InvalidProtocolBufferException("a repeated varint field of wire type " + wire);
      }
    }

    void add(long v) {
      if (n == values.length) {
        values = Arrays.copyOf(values, n * 2);
      }
      values[n++] = v;
    }

    long[] toArray() {
      return Arrays.copyOf(values, n);
    }
  }
}
